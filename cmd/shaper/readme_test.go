package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/shaper-dev/shaper/config"
	"go.yaml.in/yaml/v3"
)

// yamlBlock matches a fenced yaml block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// doc is a Markdown file written for people, by its path relative to this
// package, and its text.
type doc struct {
	path string
	text []byte
}

// docs returns the README, the contributing guide, the changelog, every
// page of docs/, and the deploy guide.
func docs(t *testing.T) []doc {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	var out []doc
	for _, path := range append([]string{"../../README.md", "../../CONTRIBUTING.md", "../../CHANGELOG.md", "../../deploy/README.md"}, pages...) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, doc{path, text})
	}
	return out
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
	for _, doc := range docs(t) {
		for i, m := range yamlBlock.FindAllStringSubmatch(string(doc.text), -1) {
			blocks++
			src := m[1]
			var top map[string]any
			if err := yaml.Unmarshal([]byte(src), &top); err != nil {
				t.Errorf("%s, yaml block %d does not parse: %v\n%s", doc.path, i+1, err, src)
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
				t.Errorf("%s, yaml block %d fails validate:\n%v\n%s", doc.path, i+1, err, strings.TrimSpace(m[1]))
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
	for _, doc := range docs(t) {
		text := strings.ToLower(string(doc.text))
		for _, wrong := range []string{"dispatcher", "could change the rate", "can change the rate"} {
			if i := strings.Index(text, wrong); i >= 0 {
				t.Errorf("%s says %q: %q", doc.path, wrong, string(doc.text)[max(0, i-80):min(len(doc.text), i+80)])
			}
		}
	}
}

// The README is a map, not the reference: it stays short.
func TestReadmeIsShort(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 400 {
		t.Errorf("README.md has %d lines; want at most 400: move reference to docs/", n)
	}
}

// Docs state what is true now and how to reproduce it; which commit, temp
// directory or benchmark run produced a figure is git's history. (The
// generated docs/benchmarks.md names the commit it measured, once, in its
// provenance.)
func TestDocsNameNoCommitsTempPathsOrRuns(t *testing.T) {
	tests := []struct {
		name string
		re   *regexp.Regexp
	}{
		{"a commit hash", regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)},
		{"a temp path", regexp.MustCompile(`/tmp/`)},
		{"a run letter", regexp.MustCompile(`\bruns? [A-Z]\b|\bruns [A-Z]–[A-Z]\b`)},
	}
	for _, doc := range docs(t) {
		generated := strings.HasSuffix(doc.path, "/benchmarks.md") // names the commit it measured
		for n, line := range strings.Split(string(doc.text), "\n") {
			for _, tt := range tests {
				for _, m := range tt.re.FindAllString(line, -1) {
					if tt.name == "a commit hash" && (generated || m == "0123456789abcdef" || !strings.ContainsAny(m, "abcdef") || !strings.ContainsAny(m, "0123456789")) {
						continue // a number, a word such as "defaced", an example secret, or the provenance of a generated page
					}
					t.Errorf("%s:%d names %s, %q: %s", doc.path, n+1, tt.name, m, line)
				}
			}
		}
	}
}

// markdownLink matches an inline link or image, [text](target) or
// ![alt](target), whose target has no space.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the docs points to a file or directory that
// exists, and every #anchor to a heading of the file it names.
func TestDocLinksResolve(t *testing.T) {
	for _, doc := range docs(t) {
		if strings.HasPrefix(doc.path, "../../deploy/") {
			continue // the deploy guide's own test checks it
		}
		for n, line := range proseLines(string(doc.text)) {
			if line == "" {
				continue
			}
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue // http://, https://, mailto:
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := doc.path
				if path != "" {
					file = filepath.Join(filepath.Dir(doc.path), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s:%d links to %s, which does not exist", doc.path, n+1, target)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s:%d links to #%s in %s, which is not Markdown", doc.path, n+1, anchor, path)
					continue
				}
				text, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if anchors := headingAnchors(string(text)); !slices.Contains(anchors, anchor) {
					t.Errorf("%s:%d links to %s, but %s has no heading #%s (it has %v)", doc.path, n+1, target, file, anchor, anchors)
				}
			}
		}
	}
}

// proseLines returns the lines of a Markdown text with those inside fenced
// code blocks blanked, keeping the line numbers.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lower case, spaces to hyphens, anything but letters,
// digits, hyphens and underscores dropped, -1, -2... on repeats.
func headingAnchors(text string) []string {
	var anchors []string
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors = append(anchors, a+"-"+strconv.Itoa(k))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors
}
