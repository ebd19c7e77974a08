package scheduler

// ErrLeaseExpired is the cause a job's context carries when its lease
// deadline passed.
var ErrLeaseExpired = errLeaseExpired
