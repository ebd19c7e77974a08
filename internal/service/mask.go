package service

import (
	"os"
	"regexp"
	"strings"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/internal/redact"
)

// urlRE finds URLs in free text (an error line, a job's output).
var urlRE = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+`)

// Masker returns the function that masks secrets in text a job produced
// before the cluster's history stores it: every value the config expanded
// from ${VAR} (values of 4 bytes or more; shorter ones would mask common
// words) becomes "***", and every URL is cut to scheme://host[:port].
func Masker(cfg *config.Config) func(string) string {
	var pairs []string
	for _, name := range cfg.Referenced() {
		if v := os.Getenv(name); len(v) >= 4 {
			pairs = append(pairs, v, "***")
		}
	}
	repl := strings.NewReplacer(pairs...)
	return func(s string) string {
		if s == "" {
			return s
		}
		if len(pairs) > 0 {
			s = repl.Replace(s)
		}
		return urlRE.ReplaceAllStringFunc(s, redact.URL)
	}
}
