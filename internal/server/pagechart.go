package server

import (
	"strconv"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/ops"
)

// chart is a schedule's run durations as bars, oldest on the left, drawn
// server-side as inline SVG so a slowing job shows without JavaScript.
type chart struct {
	Width, Height int
	Bars          []bar
	Lines         []limit // expected_runtime and min_runtime, when on the scale
	Max           string  // the top of the scale: the longest run, or min_runtime
	Empty         bool
	// Above names expected_runtime when it lies above the scale (every
	// run well within it): a line there would squash the bars.
	Above string
}

// limit is a horizontal line across the chart at a duration.
type limit struct {
	Y     float64
	Class string // "expected" or "min"
	Label string // its <title>
}

type bar struct {
	X, Y, W, H float64
	Class      string // resclass of the run's result
	Label      string // tick, result, duration: the bar's <title>
}

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartWidth  = 600
	chartHeight = 120
	chartGap    = 1.0
	chartMinBar = 1.5 // a 0s run still shows
)

// durationChart draws runs (newest first, as history gives them) and the
// schedule's anomaly bounds: min_runtime (0: none), always on the scale,
// and expected_runtime when a run comes up to it.
func durationChart(runs []ops.Run, expected, minRuntime time.Duration) chart {
	c := chart{Width: chartWidth, Height: chartHeight, Empty: len(runs) == 0}
	if c.Empty {
		return c
	}
	var maxD time.Duration
	for _, r := range runs {
		maxD = max(maxD, r.Duration)
	}
	maxD = max(maxD, minRuntime)
	c.Max = fmtDuration(maxD)
	at := func(d time.Duration) float64 {
		if maxD <= 0 {
			return 0
		}
		return round1(chartHeight - float64(chartHeight)*float64(d)/float64(maxD))
	}
	if expected > 0 && expected <= maxD {
		c.Lines = append(c.Lines, limit{Y: at(expected), Class: "expected", Label: "expected_runtime " + fmtDuration(expected)})
	} else if expected > 0 {
		c.Above = fmtDuration(expected)
	}
	if minRuntime > 0 {
		c.Lines = append(c.Lines, limit{Y: at(minRuntime), Class: "min", Label: "min_runtime " + fmtDuration(minRuntime)})
	}
	slot := float64(chartWidth) / float64(len(runs))
	w := max(slot-chartGap, 1)
	for i := range runs {
		r := runs[len(runs)-1-i] // oldest first
		h := float64(chartHeight)
		if maxD > 0 {
			h = float64(chartHeight) * float64(r.Duration) / float64(maxD)
		}
		h = max(h, chartMinBar)
		c.Bars = append(c.Bars, bar{
			X: round1(float64(i) * slot), Y: round1(chartHeight - h), W: round1(w), H: round1(h),
			Class: resultClass(r.Result),
			Label: r.Tick.UTC().Format(time.RFC3339) + " " + r.Result + " " + fmtDuration(r.Duration) + " on " + r.Node,
		})
	}
	return c
}

func round1(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 1, 64), 64)
	return v
}
