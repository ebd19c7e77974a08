package metrics

import (
	"compress/gzip"
	"io"
	"log"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
)

// Handler serves /metrics: everything New registered, in the text
// exposition format (which every Prometheus reads, whatever it asks for).
// The fixed metrics are gathered as promhttp does; the per-schedule series
// are written straight from their records, so a scrape of 100,000
// schedules costs a pass over them, not two million protobuf messages.
// The body is gzipped at the fastest level when the client accepts it, as
// Prometheus does: the text is large and very repetitive. A collector
// that fails is logged on errLog (nil: not logged) and the rest is served,
// as promhttp.ContinueOnError does.
func (m *Metrics) Handler(errLog *log.Logger) http.Handler {
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mfs, err := m.fixed.Gather()
		if err != nil && errLog != nil {
			errLog.Printf("metrics: gathering: %v", err)
		}
		h := w.Header()
		h.Set("Content-Type", string(format))
		var out io.Writer = w
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
			h.Add("Vary", "Accept-Encoding")
			zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
			defer func() { _ = zw.Close() }()               // the client went away: nothing to do
			out = zw
		}
		enc := expfmt.NewEncoder(out, format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				return // the client went away
			}
		}
		_ = m.sched.writeText(func(b []byte) error {
			_, err := out.Write(b)
			return err
		})
	})
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) != "gzip" {
			continue
		}
		return strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0"
	}
	return false
}
