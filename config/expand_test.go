package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// headerOf parses minimal with the sink header X-Test set to give, and
// returns its value as loaded, or the error.
func headerOf(give string, vars map[string]string) (string, error) {
	src := strings.Replace(minimal, `{url: "https://psp.example.com/notify"}`,
		`{url: "https://psp.example.com/notify", headers: {X-Test: '`+give+`'}}`, 1)
	cfg, err := Parse([]byte(src), env(vars))
	if err != nil {
		return "", err
	}
	return cfg.Pipelines[0].Sink.HTTP.Headers["X-Test"], nil
}

func TestExpandTakesADefaultWhenTheVariableIsUnsetOrEmpty(t *testing.T) {
	vars := map[string]string{"SET": "value", "EMPTY": ""}
	tests := []struct {
		give string
		want string
	}{
		{"${SET}", "value"},
		{"${SET:-fallback}", "value"},
		{"${UNSET:-fallback}", "fallback"},
		{"${EMPTY:-fallback}", "fallback"},
		{"${EMPTY}", ""},
		{"${UNSET:-}", ""},
		{"a-${UNSET:-b}-${SET}-c", "a-b-value-c"},
		{"${UNSET:-with spaces, and: colons}", "with spaces, and: colons"},
		{"${UNSET:-a:-b}", "a:-b"},
		{"$${SET}", "${SET}"},
		{"$${UNSET}", "${UNSET}"},
		{"$${UNSET:-x} ${SET}", "${UNSET:-x} value"},
		{"$$", "$$"},
		{"$SET", "$SET"},
		{"cost: $5", "cost: $5"},
	}
	for _, tt := range tests {
		got, err := headerOf(tt.give, vars)
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
}

func TestExpandRefusesWhatItCannotReplace(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"${UNSET}", `headers.X-Test: environment variable UNSET is not set`},
		{"${EMPTY:-${SET}}", `headers.X-Test: ${EMPTY:-...}: a default must not hold ${ (variables do not nest)`},
		{"${1X:-a}", `headers.X-Test: invalid variable name ${1X}`},
		{"${A-b}", `headers.X-Test: invalid variable name ${A-b}`},
		{"${}", `headers.X-Test: invalid variable name ${}`},
		{"${SET", `headers.X-Test: unterminated ${ in value`},
	}
	for _, tt := range tests {
		_, err := headerOf(tt.give, map[string]string{"SET": "value", "EMPTY": ""})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("expand(%q) = %v; want %q", tt.give, err, tt.want)
		}
	}
}

// A default fills numbers and durations too, and it is written in the
// file, so an error may show it; a value from the environment never.
func TestExpandDefaultsOfOtherTypes(t *testing.T) {
	src := strings.Replace(minimal, "{limit: 50}", "{limit: '${LIMIT:-12.5}', warmup: '${WARM:-3s}'}", 1)
	cfg, err := Parse([]byte(src), env(map[string]string{"WARM": ""}))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if r := cfg.Pipelines[0].Rate; r.Limit != 12.5 || r.Warmup.String() != "3s" {
		t.Errorf("limit, warmup = %v, %v; want 12.5, 3s", r.Limit, r.Warmup)
	}
	src = strings.Replace(minimal, "{limit: 50}", "{limit: '${LIMIT:-fast}'}", 1)
	if _, err := Parse([]byte(src), env(nil)); err == nil || !strings.Contains(err.Error(), `rate.limit: want a number, got "fast"`) {
		t.Errorf("Parse(limit ${LIMIT:-fast}) = %v; want the default shown", err)
	}
	if _, err := Parse([]byte(src), env(map[string]string{"LIMIT": "quick"})); err == nil || strings.Contains(err.Error(), "quick") {
		t.Errorf("Parse(limit ${LIMIT:-fast}, LIMIT=quick) = %v; want an error that does not show the value", err)
	}
}

func TestUnknownKeySuggestsTheKnownKeyOneSlipAway(t *testing.T) {
	tests := []struct {
		give string // replaces "rate: {limit: 50}" of minimal
		want string
	}{
		{"bukcet: {capacity: 5}\n    rate: {limit: 50}", `pipelines[0].bukcet: unknown key (did you mean "bucket"?)`},
		{"rate: {limt: 50}", `pipelines[0].rate.limt: unknown key (did you mean "limit"?)`},
		{"rate: {limit: 50, Mode: token}", `pipelines[0].rate.Mode: unknown key (did you mean "mode"?)`},
		{"rate: {limit: 50, WARMUP: 1s}", `pipelines[0].rate.WARMUP: unknown key (did you mean "warmup"?)`},
		{"rate: {limit: 50, warmupp: 1s}", `pipelines[0].rate.warmupp: unknown key (did you mean "warmup"?)`},
		{"rate: {limit: 50, wormup: 1s}", `pipelines[0].rate.wormup: unknown key (did you mean "warmup"?)`},
		{"rate: {limit: 50, burt: 1}", `pipelines[0].rate.burt: unknown key (did you mean "burst"?)`},
		{"rate: {limit: 50, pre_key: {limit: 1}}", `pipelines[0].rate.pre_key: unknown key (did you mean "per_key"?)`},
		{"rate: {limit: 50, key_rate: {limit: 1}}", `pipelines[0].rate.key_rate: unknown key`},
		{"rate: {limit: 50, tempo: 1}", `pipelines[0].rate.tempo: unknown key`},
		{"rate: {limit: 50}\n    keys: {from: kafka_key}", `pipelines[0].keys: unknown key (did you mean "key"?)`},
	}
	for _, tt := range tests {
		src := strings.Replace(minimal, "rate: {limit: 50}", tt.give, 1)
		_, err := Parse([]byte(src), env(nil))
		if err == nil {
			t.Errorf("Parse(%s) = nil; want %q", tt.give, tt.want)
			continue
		}
		line := lineWith(err.Error(), "unknown key")
		if line != tt.want {
			t.Errorf("Parse(%s) = %q; want %q", tt.give, line, tt.want)
		}
	}
}

// lineWith returns the first line of text that contains s.
func lineWith(text, s string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

func TestOneEditApart(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"bucket", "bukcet", true},   // swapped
		{"bucket", "bucket", false},  // equal
		{"bucket", "bucke", true},    // dropped
		{"bucket", "buckets", true},  // added
		{"bucket", "xbucket", true},  // added at the start
		{"bucket", "bocket", true},   // changed
		{"bucket", "bcuekt", false},  // two swaps
		{"bucket", "bukcett", false}, // a swap and an addition
		{"limit", "lmt", false},      // two dropped
		{"", "a", true},
		{"ab", "ba", true},
		{"abc", "cba", false},
	}
	for _, tt := range tests {
		if got := oneEditApart(tt.a, tt.b); got != tt.want {
			t.Errorf("oneEditApart(%q, %q) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
		if got := oneEditApart(tt.b, tt.a); got != tt.want {
			t.Errorf("oneEditApart(%q, %q) = %v; want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

// With SkipEnv, a value that names an unset variable is noted, placed and
// left unchecked: a required token, an unparsable URL or a number that
// cannot be known make no problem, and the rest is checked as ever.
func TestSkipEnvLeavesUnsetVariablesUncheckedAndChecksTheRest(t *testing.T) {
	src := `admin:
  listen: 0.0.0.0:9090
  token: ${ADMIN_TOKEN}
pipelines:
  - name: psp
    source:
      kafka:
        brokers: ["${BROKER}"]
        topic: t
        group: g
        sasl: {mechanism: PLAIN, username: u, password: "${KAFKA_PASSWORD}"}
    rate:
      limit: ${LIMIT}
      warmup: ${WARMUP:-10s}
    sink:
      http:
        url: ${SINK_URL}
        headers:
          Authorization: Bearer ${PSP_TOKEN}
`
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ADMIN_TOKEN", "BROKER", "KAFKA_PASSWORD", "LIMIT", "WARMUP", "SINK_URL", "PSP_TOKEN"} {
		t.Setenv(name, "") // so that Unsetenv is undone after the test
		os.Unsetenv(name)
	}
	cfg, unchecked, err := LoadWith(path, Options{SkipEnv: true})
	if err != nil {
		t.Fatalf("LoadWith(SkipEnv) = %v; want no problem", err)
	}
	want := []string{
		path + ":3:3: admin.token: ${ADMIN_TOKEN} is not set: not checked",
		path + ":8:19: pipelines[0].source.kafka.brokers[0]: ${BROKER} is not set: not checked",
		path + ":11:47: pipelines[0].source.kafka.sasl.password: ${KAFKA_PASSWORD} is not set: not checked",
		path + ":13:7: pipelines[0].rate.limit: ${LIMIT} is not set: not checked",
		path + ":17:9: pipelines[0].sink.http.url: ${SINK_URL} is not set: not checked",
		path + ":19:11: pipelines[0].sink.http.headers.Authorization: ${PSP_TOKEN} is not set: not checked",
	}
	if strings.Join(unchecked, "\n") != strings.Join(want, "\n") {
		t.Errorf("unchecked =\n%s\nwant\n%s", strings.Join(unchecked, "\n"), strings.Join(want, "\n"))
	}
	if got := cfg.Pipelines[0].Rate.Warmup.String(); got != "10s" {
		t.Errorf("warmup = %s; want the default 10s", got)
	}

	// Without SkipEnv each unset variable is a problem.
	if _, err := Load(path); err == nil || strings.Count(err.Error(), "is not set") != 6 {
		t.Errorf("Load = %v; want 6 unset variables", err)
	}

	// What is wrong besides is still reported, and the notes come along.
	bad := strings.Replace(src, "topic: t", "topic: t\n        strat: latest", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, unchecked, err = LoadWith(path, Options{SkipEnv: true})
	if err == nil || !strings.Contains(err.Error(), `pipelines[0].source.kafka.strat: unknown key (did you mean "start"?)`) || len(unchecked) != 6 {
		t.Errorf("LoadWith(SkipEnv, a typo) = %v, %d unchecked; want the typo and 6 unchecked", err, len(unchecked))
	}
	if strings.Contains(err.Error(), "not set") {
		t.Errorf("LoadWith(SkipEnv) = %v; want no unset variable among the problems", err)
	}
}

// yaml decodes 100.5 into an int as 100: an integer key refuses a
// fraction instead of cutting it.
func TestParseRefusesAFractionForAnInteger(t *testing.T) {
	tests := []struct {
		give string
		want string // "" when valid
	}{
		{"100", ""},
		{"1_000", ""},
		{"0x10", ""},
		{"'${CAP:-200}'", ""},
		{"100.5", `pipelines[0].bucket.capacity: want an integer, got "100.5"`},
		{"1e3", `pipelines[0].bucket.capacity: want an integer, got "1e3"`},
		{"'${CAP:-2.5}'", `pipelines[0].bucket.capacity: want an integer, got "2.5"`},
	}
	for _, tt := range tests {
		src := strings.Replace(minimal, "rate: {limit: 50}", "rate: {limit: 50}\n    bucket: {capacity: "+tt.give+"}", 1)
		_, err := Parse([]byte(src), env(nil))
		checkParseErr(t, "capacity: "+tt.give, err, tt.want)
	}
}
