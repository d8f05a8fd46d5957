package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/shaper-dev/shaper/config"
)

// compiledSchema runs `shaper schema` and compiles what it prints, which
// checks it against the draft 2020-12 meta-schema too.
func compiledSchema(t *testing.T) (*jsonschema.Schema, []byte) {
	t.Helper()
	code, out, errs := runMain(t, "schema")
	if code != exitOK {
		t.Fatalf("shaper schema = %d: %s", code, errs)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("shaper schema prints no JSON: %v", err)
	}
	if v, _ := doc.(map[string]any)["$schema"].(string); v != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %q; want draft 2020-12", v)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("shaper.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("shaper.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s, []byte(out)
}

// yamlInstance is a YAML config as the JSON value a schema validates, as
// yaml-language-server sees it.
func yamlInstance(t *testing.T, src string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatalf("yaml: %v\n%s", err, src)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// Every example config passes the schema, and so does every whole config
// in the docs.
func TestSchemaValidatesEveryExampleConfig(t *testing.T) {
	s, _ := compiledSchema(t)
	paths, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(yamlInstance(t, string(data))); err != nil {
			t.Errorf("%s fails the schema:\n%v", path, err)
		}
	}
	whole := 0
	for _, doc := range docs(t) {
		for i, m := range yamlBlock.FindAllStringSubmatch(string(doc.text), -1) {
			if !strings.Contains(m[1], "\npipelines:") && !strings.HasPrefix(m[1], "pipelines:") {
				continue // a piece of a pipeline
			}
			whole++
			if err := s.Validate(yamlInstance(t, m[1])); err != nil {
				t.Errorf("%s, yaml block %d fails the schema:\n%v", doc.path, i+1, err)
			}
		}
	}
	if whole == 0 {
		t.Error("found no whole config in the docs")
	}
}

// The schema and validate agree on what is wrong in a file, and on what
// is right: each case is validConfig changed in one place.
func TestSchemaAndValidateAgree(t *testing.T) {
	s, _ := compiledSchema(t)
	tests := []struct {
		name     string
		old, new string
		valid    bool
	}{
		{"as it is", "", "", true},
		{"unknown key", "bucket: {", "bukcet: {", false},
		{"unknown key deep", "timeout: 2s}", "timeout: 2s, retry: {max_atempts: 3}}", false},
		{"number as a word", "limit: 50", "limit: fast", false},
		{"number as a list", "capacity: 100", "capacity: [100]", false},
		{"fractional integer", "capacity: 100", "capacity: 100.5", false},
		{"capacity at the maximum", "capacity: 100", "capacity: 10000000", true},
		{"capacity above the maximum", "capacity: 100", "capacity: 10000001", false},
		{"number from the environment", "limit: 50", "limit: '${SCHEMA_TEST_LIMIT:-50}'", true},
		{"mapping as a string", "rate: {limit: 50}", "rate: fast", false},
		{"duration without a unit", "max_queue_time: 5s", "max_queue_time: 5", false},
		{"duration as a word", "max_queue_time: 5s", "max_queue_time: soon", false},
		{"duration of several units", "max_queue_time: 5s", "max_queue_time: 1m30.5s", true},
		{"duration in microseconds", "max_queue_time: 5s", "max_queue_time: 5000000µs", true},
		{"duration zero", "rate: {limit: 50}", "rate: {limit: 50, warmup: 0}", true},
		{"duration negative", "timeout: 2s", "timeout: -2s", false},
		{"duration from the environment", "timeout: 2s", "timeout: '${SCHEMA_TEST_TIMEOUT:-2s}'", true},
		{"mode token", "rate: {limit: 50}", "rate: {limit: 50, mode: token}", true},
		{"mode unknown", "rate: {limit: 50}", "rate: {limit: 50, mode: wavy}", false},
		{"mode from the environment", "rate: {limit: 50}", "rate: {limit: 50, mode: '${SCHEMA_TEST_MODE:-token}'}", true},
		{"on_expire deliver", "max_queue_time: 5s", "max_queue_time: 5s, on_expire: deliver", true},
		{"on_expire unknown", "max_queue_time: 5s", "max_queue_time: 5s, on_expire: later", false},
		{"no name", "- name: psp\n", "- \n", false},
		{"no rate limit", "rate: {limit: 50}", "rate: {mode: token}", false},
		{"no source", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, "{}", false},
		{"two sources", "    source:\n", "    source:\n      kafka: {brokers: [\"127.0.0.1:9092\"], topic: t, group: g}\n", false},
		{"kafka source", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, `kafka: {brokers: ["127.0.0.1:9092"], topic: t, group: g, start: latest}`, true},
		{"kafka without group", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, `kafka: {brokers: ["127.0.0.1:9092"], topic: t}`, false},
		{"kafka without brokers", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, `kafka: {brokers: [], topic: t, group: g}`, false},
		{"kafka bad start", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, `kafka: {brokers: ["127.0.0.1:9092"], topic: t, group: g, start: middle}`, false},
		{"sasl unknown mechanism", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, `kafka: {brokers: ["127.0.0.1:9092"], topic: t, group: g, sasl: {mechanism: GSSAPI, username: u, password: p}}`, false},
		{"tls 1.3", "timeout: 2s}", `timeout: 2s, tls: {min_version: "1.3"}}`, true},
		{"tls 1.1", "timeout: 2s}", `timeout: 2s, tls: {min_version: "1.1"}}`, false},
		{"url and url_from", "timeout: 2s}", "timeout: 2s, url_from: header:Notify-Url, allowed_hosts: [a.example]}", false},
		{"url_from", `url: "https://psp.example.com/notify", `, "url_from: 'json:merchant.url', allowed_hosts: [a.example], ", true},
		{"url_from without allowed_hosts", `url: "https://psp.example.com/notify", `, "url_from: header:Notify-Url, ", false},
		{"url_from of another form", `url: "https://psp.example.com/notify", `, "url_from: kafka_key, allowed_hosts: [a.example], ", false},
		{"key from a header", "rate: {limit: 50}", "rate: {limit: 50}\n    key: {from: 'header:Merchant-Id', ordered: true}", true},
		{"key from a JSON path", "rate: {limit: 50}", "rate: {limit: 50}\n    key: {from: 'json:merchant.id'}", true},
		{"key from a header without a name", "rate: {limit: 50}", "rate: {limit: 50}\n    key: {from: 'header:'}", false},
		{"key from nowhere", "rate: {limit: 50}", "rate: {limit: 50}\n    key: {from: payload}", false},
		{"key without from", "rate: {limit: 50}", "rate: {limit: 50}\n    key: {ordered: true}", false},
		{"signing scheme unknown", "timeout: 2s}", "timeout: 2s, signing: {scheme: hmac, secret: 0123456789abcdef}}", false},
		{"signing without secret", "timeout: 2s}", "timeout: 2s, signing: {scheme: shaper}}", false},
		{"shared without fallback", "rate: {limit: 50}", `rate: {limit: 50, shared: {redis: {addr: "127.0.0.1:6379"}}}`, false},
		{"shared with addr and addrs", "rate: {limit: 50}", `rate: {limit: 50, shared: {redis: {addr: "a:1", addrs: ["b:1"]}, fallback_limit: 10}}`, false},
		{"per-key limit", "rate: {limit: 50}", "rate: {limit: 50, per_key: {limit: 5}}\n    key: {from: 'header:Merchant-Id'}", true},
		{"per-key without limit", "rate: {limit: 50}", "rate: {limit: 50, per_key: {burst: 1}}\n    key: {from: 'header:Merchant-Id'}", false},
		{"sasl without password", `nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}`, `kafka: {brokers: ["127.0.0.1:9092"], topic: t, group: g, sasl: {mechanism: PLAIN, username: u}}`, false},
		{"nats source without subject", "subject: callbacks.psp, ", "", false},
		{"nats sink without subject", `http: {url: "https://psp.example.com/notify", timeout: 2s}`, `nats: {url: "nats://127.0.0.1:4222"}`, false},
		{"kafka dead letter", "timeout: 2s}", "timeout: 2s}\n    dead_letter: {kafka: {brokers: [\"127.0.0.1:9092\"], topic: dlq}}", true},
		{"kafka dead letter without topic", "timeout: 2s}", "timeout: 2s}\n    dead_letter: {kafka: {brokers: [\"127.0.0.1:9092\"]}}", false},
		{"shared without redis", "rate: {limit: 50}", "rate: {limit: 50, shared: {fallback_limit: 10}}", false},
		{"bool as a word", "timeout: 2s}", "timeout: 2s, forward_headers: sometimes}", false},
		{"two sinks", `http: {url: "https://psp.example.com/notify", timeout: 2s}`, `http: {url: "https://psp.example.com/notify", timeout: 2s}` + "\n      nats: {url: \"nats://127.0.0.1:4222\", subject: s}", false},
		{"dead letter without target", "timeout: 2s}", "timeout: 2s}\n    dead_letter: {}", false},
		{"no pipelines", "pipelines:\n", "pipelines: []\nunused:\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(validConfig, tt.old) {
				t.Fatalf("validConfig lacks %q", tt.old)
			}
			src := strings.Replace(validConfig, tt.old, tt.new, 1)
			schemaErr := s.Validate(yamlInstance(t, src))
			_, loadErr := config.Parse([]byte(src), func(string) (string, bool) { return "", false })
			if (schemaErr == nil) != tt.valid {
				t.Errorf("schema: %v; want valid %v:\n%s", schemaErr, tt.valid, src)
			}
			if (loadErr == nil) != tt.valid {
				t.Errorf("validate: %v; want valid %v:\n%s", loadErr, tt.valid, src)
			}
		})
	}
}

// Each key's description is its doc comment; keys with fixed values list
// them; durations are strings.
func TestSchemaDescribesKeysFromTheirDocComments(t *testing.T) {
	_, out := compiledSchema(t)
	var doc struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Description string `json:"description"`
				Ref         string `json:"$ref"`
				AnyOf       []struct {
					Enum []string `json:"enum"`
				} `json:"anyOf"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	bucket := doc.Defs["shaper.BucketConfig"].Properties
	if d := bucket["max_queue_time"].Description; !strings.HasPrefix(d, "MaxQueueTime is the longest a message may wait in the bucket before its departure. Default 5s.") {
		t.Errorf("bucket.max_queue_time description = %q; want its doc comment, unwrapped", d)
	}
	if r := bucket["max_queue_time"].Ref; r != "#/$defs/duration" {
		t.Errorf("bucket.max_queue_time $ref = %q; want a duration", r)
	}
	if e := bucket["on_expire"].AnyOf; len(e) == 0 || !slices.Equal(e[0].Enum, []string{"dead_letter", "drop", "deliver"}) {
		t.Errorf("bucket.on_expire anyOf = %v; want the enum dead_letter, drop, deliver", e)
	}
	if len(doc.Defs["sources.KafkaConfig"].Properties) == 0 || len(doc.Defs["sinks.KafkaConfig"].Properties) == 0 {
		t.Error("the two KafkaConfig types are not both in $defs")
	}
}

// The configuration table of docs/configuration.md has a row for every key of the schema
// and no row for a key it lacks, so neither can drift. A row's keys are
// pipeline keys (source.kafka.topic) unless they start with admin.,
// shutdown. or pipelines; `.group` after `source.kafka.topic` is
// source.kafka.group; * stands for one key (sink.*.timeout). A key under a
// row's key (rate.shared.redis.addr) may be named in the row's meaning
// instead (`addr`).
func TestConfigurationDocListsEveryKeyOfTheSchema(t *testing.T) {
	_, out := compiledSchema(t)
	var schema map[string]any
	if err := json.Unmarshal(out, &schema); err != nil {
		t.Fatal(err)
	}
	leaves, all := schemaKeys(schema)
	rows := configDocRows(t)
	if len(rows) < 20 {
		t.Fatalf("found %d rows in the table of docs/configuration.md; want it all", len(rows))
	}
	for _, leaf := range leaves {
		dot := strings.LastIndex(leaf, ".") // -1 for a key of the file's top (tuning)
		parent, last := leaf[:max(dot, 0)], leaf[dot+1:]
		listed := false
		for _, r := range rows {
			for _, k := range r.keys {
				listed = listed || k.MatchString(leaf) ||
					k.MatchString(parent) && strings.Contains(r.meaning, "`"+last+"`")
			}
		}
		if !listed {
			t.Errorf("docs/configuration.md's table lacks key %s", strings.TrimPrefix(leaf, "pipelines[]."))
		}
	}
	for _, r := range rows {
		for i, k := range r.keys {
			if !slices.ContainsFunc(all, k.MatchString) {
				t.Errorf("docs/configuration.md's table lists %s, which the schema lacks", r.names[i])
			}
		}
	}
}

// schemaKeys returns the key paths of the schema's values (leaves) and of
// all its keys, mappings too: admin.listen, pipelines[].sink.http.url.
func schemaKeys(schema map[string]any) (leaves, all []string) {
	defs, _ := schema["$defs"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			d, _ := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
			return d
		}
		return s
	}
	var walk func(s map[string]any, path string)
	walk = func(s map[string]any, path string) {
		props, _ := s["properties"].(map[string]any)
		for key, v := range props {
			p := resolve(v.(map[string]any))
			kp := strings.TrimPrefix(path+"."+key, ".")
			if items, ok := p["items"].(map[string]any); ok {
				if item := resolve(items); item["properties"] != nil {
					kp += "[]"
					p = item
				}
			}
			all = append(all, kp)
			if p["properties"] != nil {
				walk(p, kp)
			} else {
				leaves = append(leaves, kp)
			}
		}
	}
	walk(schema, "")
	slices.Sort(leaves)
	return leaves, all
}

// configRow is a row of the table of docs/configuration.md.
type configRow struct {
	names   []string         // its keys as written, shorthand expanded
	keys    []*regexp.Regexp // each a whole key path of the schema
	meaning string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// configDocRows reads the key table of the Keys section of
// docs/configuration.md.
func configDocRows(t *testing.T) []configRow {
	t.Helper()
	fileKeys := map[string]bool{} // admin, shutdown, tuning, pipelines: the rest is a pipeline's
	ft := reflect.TypeOf(config.File{})
	for i := range ft.NumField() {
		name, _, _ := strings.Cut(ft.Field(i).Tag.Get("yaml"), ",")
		fileKeys[name] = true
	}
	text, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n## Keys\n")
	if !ok {
		t.Fatal("docs/configuration.md has no ## Keys section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []configRow
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		r := configRow{meaning: strings.Join(cells[2:], " | ")}
		var last string
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			name := m[1]
			if strings.HasPrefix(name, ".") {
				name = last[:strings.LastIndex(last, ".")] + name
			}
			last = name
			full := name
			if top, _, _ := strings.Cut(full, "."); !fileKeys[strings.TrimSuffix(top, "[]")] {
				full = "pipelines[]." + full
			}
			pattern := strings.ReplaceAll(regexp.QuoteMeta(full), `\*`, `[^.]+`)
			r.names = append(r.names, name)
			r.keys = append(r.keys, regexp.MustCompile("^"+pattern+"$"))
		}
		rows = append(rows, r)
	}
	return rows
}
