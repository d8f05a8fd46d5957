package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/config"
	"go.yaml.in/yaml/v3"
)

// yamlBlock matches a fenced yaml block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// docFiles returns the Markdown files written for people, relative to this
// package: the README, the contributing guide, the changelog, every page
// of docs/, and the deploy guide.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	return append([]string{"../../README.md", "../../CONTRIBUTING.md", "../../CHANGELOG.md", "../../deploy/README.md"}, pages...)
}

// Every YAML block of the docs passes validate: a whole config as it is, a
// piece of a pipeline (a rate: or sink: block, as indented in the docs)
// laid over a minimal pipeline. Every ${VAR} is set.
func TestEveryYAMLBlockInTheDocsPassesValidate(t *testing.T) {
	base := map[string]any{
		"name":   "docs",
		"source": map[string]any{"nats": map[string]any{"url": "nats://127.0.0.1:4222", "subject": "s", "stream": "S"}},
		"rate":   map[string]any{"limit": 50},
		"sink":   map[string]any{"http": map[string]any{"url": "https://psp.example.com/notify"}},
	}
	lookup := func(string) (string, bool) { return "a-value-from-the-environment", true }
	blocks := 0
	for _, doc := range docFiles(t) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlBlock.FindAllStringSubmatch(string(text), -1) {
			blocks++
			src := m[1]
			var top map[string]any
			if err := yaml.Unmarshal([]byte(src), &top); err != nil {
				t.Errorf("%s, yaml block %d does not parse: %v\n%s", doc, i+1, err, src)
				continue
			}
			if _, whole := top["pipelines"]; !whole {
				pipeline := map[string]any{}
				for k, v := range base {
					pipeline[k] = v
				}
				for k, v := range top {
					pipeline[k] = v
				}
				out, err := yaml.Marshal(map[string]any{"pipelines": []any{pipeline}})
				if err != nil {
					t.Fatal(err)
				}
				src = string(out)
			}
			if _, err := config.Parse([]byte(src), lookup); err != nil {
				t.Errorf("%s, yaml block %d fails validate:\n%v\n%s", doc, i+1, err, strings.TrimSpace(m[1]))
			}
		}
	}
	if blocks < 7 {
		t.Errorf("found %d yaml blocks in the docs; want the README's and docs/'s", blocks)
	}
}

// The README names what the code has and says what it does: the scheduler,
// workers and attempts of shaper/pipeline.go, not a "dispatcher" no type
// is called; and without admin.token a read-only admin API, not one that
// anyone could use to change the rate.
func TestReadmeSaysWhatTheCodeDoes(t *testing.T) {
	for _, doc := range docFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ToLower(string(data))
		for _, wrong := range []string{"dispatcher", "could change the rate", "can change the rate"} {
			if i := strings.Index(text, wrong); i >= 0 {
				t.Errorf("%s says %q: %q", doc, wrong, string(data)[max(0, i-80):min(len(data), i+80)])
			}
		}
	}
}
