package config

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// fuzzSecret is the value of ${SECRET} while fuzzing Parse: no error may
// show it unless the input itself holds it.
const fuzzSecret = "fuzz-s3cret-value"

// errorLine is what every line of a Parse error starts with: "config: " or
// a key path (plain keys joined by '.', list indexes, quoted odd keys) and
// ": ".
var errorLine = regexp.MustCompile(`^(config|(?:[A-Za-z0-9_-]+|\["(?:[^"\\]|\\.)*"\])(?:\[\d+\]|\.[A-Za-z0-9_-]+|\["(?:[^"\\]|\\.)*"\])*): `)

// FuzzParse feeds the config loader arbitrary bytes, with a fake
// environment. Parse must never panic; a config it accepts must validate
// again unchanged; every line of an error it returns must name a key path
// (or "config:"), and no error may show the value of a ${VAR}.
//
// The seed corpus is testdata/fuzz/FuzzParse: the example and deploy
// configs, and inputs that once found a problem.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	lookup := env(map[string]string{
		"SECRET": fuzzSecret,
		"PORT":   "9090",
		"LIMIT":  "50",
		"EMPTY":  "",
		"NL":     "line\nbreak",
		"HOST":   "127.0.0.1",
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, lookup)
		if err == nil {
			if cfg == nil {
				t.Fatal("Parse = nil, nil")
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("a config Parse accepted fails Validate: %v", err)
			}
			return
		}
		msg := err.Error()
		for _, line := range strings.Split(msg, "\n") {
			if !errorLine.MatchString(line) {
				t.Fatalf("error line %q names no key path; whole error:\n%s", line, msg)
			}
		}
		if strings.Contains(msg, fuzzSecret) && !bytes.Contains(data, []byte(fuzzSecret)) {
			t.Fatalf("error shows the value of ${SECRET}:\n%s", msg)
		}
	})
}
