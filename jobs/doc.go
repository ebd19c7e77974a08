// Package jobs owns the jobs an operator declares in the config: a command
// (argv, run in its own process group, output logged line by line) and an
// HTTP call. Both implement scheduler.Job; they learn about their tick from
// scheduler.Tick and pass it on as environment variables or headers.
package jobs
