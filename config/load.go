package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/internal/check"
	"go.yaml.in/yaml/v3"
)

// Load reads a config file, replaces ${VAR} from the environment, applies the
// defaults and validates the result. The error lists every problem found in
// one pass, each with its place in the file and its key path
// (shaper.yaml:12:7: pipelines[0].rate.limit: must be a number > 0).
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	// One byte more than the cap tells a file at the cap from a larger one.
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(path, data, os.LookupEnv)
}

// MaxConfigBytes bounds a config file: a real one is a few KB, and decoding
// a huge one takes minutes and gigabytes.
const MaxConfigBytes = 4 << 20

// maxProblems bounds the problems one Parse reports; past it, a last line
// says how many more there were.
const maxProblems = 100

// Parse is Load on the bytes of a config file, with lookup standing in for
// the environment. Its problems carry their key path but no place in a file.
func Parse(data []byte, lookup func(string) (string, bool)) (*File, error) {
	return parse("", data, lookup)
}

// parse is Parse of the file called name ("" for none).
//
// It is one pass: what does not decode (an unknown key, a wrong type, an
// unset ${VAR}) is reported together with what does not validate, except
// the validation problems at or below a key that did not decode, which
// would only repeat it.
func parse(name string, data []byte, lookup func(string) (string, bool)) (*File, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("config: larger than %d bytes (4 MiB): not read", MaxConfigBytes)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg File
	d := decoder{lookup: lookup, places: map[string]*yaml.Node{}, failed: map[string]bool{}}
	if len(root.Content) > 0 {
		d.decode(root.Content[0], reflect.ValueOf(&cfg).Elem(), "")
	}
	cfg.SetDefaults()
	errs := append(d.errs, d.explicitZeros()...)
	for _, e := range check.Flatten(cfg.Validate()) {
		if !d.belowFailed(e) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, capped(d.placed(name, d.scrub(errs)))
	}
	return &cfg, nil
}

// belowFailed reports whether a validation problem lies at or below a key
// path that did not decode.
func (d *decoder) belowFailed(e error) bool {
	path, _, _ := strings.Cut(e.Error(), ": ")
	for p := path; p != ""; p = parentPath(p) {
		if d.failed[p] {
			return true
		}
	}
	return false
}

// placed prefixes each problem with file:line:col of the YAML node at its
// key path, or of the nearest enclosing one that the file has (a required
// key that is missing points at its mapping). Without a file name, problems
// stay as they are.
func (d *decoder) placed(name string, errs []error) []error {
	if name == "" {
		return errs
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		path, _, _ := strings.Cut(e.Error(), ": ")
		n := d.places[path]
		for p := path; n == nil && p != ""; {
			p = parentPath(p)
			n = d.places[p]
		}
		if n == nil {
			out = append(out, fmt.Errorf("%s: %w", name, e))
			continue
		}
		out = append(out, fmt.Errorf("%s:%d:%d: %w", name, n.Line, n.Column, e))
	}
	return out
}

// parentPath returns the key path one step up: pipelines[0].rate for
// pipelines[0].rate.limit, pipelines for pipelines[0], "" at the top. A
// quoted key (headers["X.Y"]) is one step.
func parentPath(path string) string {
	if strings.HasSuffix(path, "\"]") {
		if i := strings.LastIndex(path, "[\""); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// capped joins at most maxProblems errors, and says how many it left out.
func capped(errs []error) error {
	if len(errs) > maxProblems {
		errs = append(errs[:maxProblems:maxProblems], fmt.Errorf("config: %d more problems not shown", len(errs)-maxProblems))
	}
	return errors.Join(errs...)
}

// explicitZeros returns a problem for each number or duration written as
// zero that SetDefaults then replaced: zero stands for "left out" in the Go
// config types, so an explicit 0 would silently become the default (a
// capacity of 0 became 1000). It requires that SetDefaults has run.
func (d *decoder) explicitZeros() []error {
	var errs []error
	for _, z := range d.zeros {
		if !z.value.IsZero() {
			errs = append(errs, fmt.Errorf("%s: must not be 0; leave the key out for the default (%v)", z.path, z.value.Interface()))
		}
	}
	return errs
}

// decoder walks a YAML tree beside the Go value it fills, so that every
// problem (an unknown key, a wrong type, an unset ${VAR}) is reported with its
// key path, all at once, instead of yaml's first error with a line number.
type decoder struct {
	lookup func(string) (string, bool)
	errs   []error
	env    []envValue // string values that took something from the environment
	nodes  int        // nodes decoded so far, aliases expanded
	zeros  []zeroValue
	// places maps each key path to its node (the key's, or a list item's),
	// for the line and column of a problem; failed holds the key paths
	// that did not decode.
	places map[string]*yaml.Node
	failed map[string]bool
}

// zeroValue is a number or duration written as zero, at its key path.
type zeroValue struct {
	path  string
	value reflect.Value // the field itself, to look at once defaults are set
}

// maxNodes bounds the YAML nodes one Parse decodes, aliases expanded. An
// anchor used many times, inside another used many times, multiplies the
// work and the errors (a few KB of YAML would give a 70 MB error); a real
// config decodes a few hundred nodes.
const maxNodes = 100_000

// envValue is a string value with ${VAR} expanded, at its key path.
type envValue struct{ path, value string }

// fromEnv is what an error shows instead of a value from the environment.
const fromEnv = "(a value from the environment)"

// minScrubbed is the length from which a value from the environment is
// blanked out of every error, not only those at its own key path. Shorter
// values (a port, "true") would blank out unrelated text, and are not
// credentials.
const minScrubbed = 8

// scrub blanks values from the environment out of validation errors. A
// ${VAR} may hold a credential, and validation quotes what it refuses (a
// pipeline name, a topic), sometimes at another key path (a durable
// consumer named after the pipeline): the value at the error's own key path
// is blanked out whatever its length, any other from minScrubbed bytes.
func (d *decoder) scrub(errs []error) []error {
	if len(d.env) == 0 {
		return errs
	}
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		path, msg, _ := strings.Cut(e.Error(), ": ")
		for _, ev := range d.env {
			if ev.value == "" || ev.path != path && len(ev.value) < minScrubbed {
				continue
			}
			quoted := strconv.Quote(ev.value)
			msg = strings.ReplaceAll(msg, quoted, fromEnv)
			msg = strings.ReplaceAll(msg, quoted[1:len(quoted)-1], fromEnv)
			msg = strings.ReplaceAll(msg, ev.value, fromEnv)
		}
		out = append(out, errors.New(path+": "+msg))
	}
	return out
}

var durationType = reflect.TypeOf(time.Duration(0))

func (d *decoder) fail(path, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s", pathOrRoot(path), fmt.Sprintf(format, args...)))
	d.failed[pathOrRoot(path)] = true
}

func pathOrRoot(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 { // first: it says why the rest is missing
			d.fail("", "more than %d values once aliases are expanded: not decoded further", maxNodes)
			d.errs = append(d.errs[len(d.errs)-1:], d.errs[:len(d.errs)-1]...)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // a key with no value keeps its zero value
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(path, "want a mapping, got %s", describe(n))
			return
		}
		fields := structFields(v)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			kpath := check.Join(path, key)
			d.places[kpath] = n.Content[i]
			if seen[key] {
				d.fail(kpath, "duplicate key")
				continue
			}
			seen[key] = true
			f, ok := fields[key]
			if !ok {
				d.fail(kpath, "unknown key")
				continue
			}
			d.decode(n.Content[i+1], f, kpath)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(path, "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			d.places[ipath] = item
			d.decode(item, s.Index(i), ipath)
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(path, "want a mapping, got %s", describe(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			val := reflect.New(v.Type().Elem()).Elem()
			d.places[check.Join(path, key)] = n.Content[i]
			d.decode(n.Content[i+1], val, check.Join(path, key))
			m.SetMapIndex(reflect.ValueOf(key), val)
		}
		v.Set(m)
	default:
		d.scalar(n, v, path)
	}
}

// scalar fills a string, number, bool or duration, after ${VAR} expansion.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, "want a single value, got %s", describe(n))
		return
	}
	text, ok := d.expand(n.Value, path)
	if !ok {
		return
	}
	shown := fmt.Sprintf("%q", text)
	if text != n.Value {
		shown = "a value from the environment" // may be a secret: never echo it
		if v.Kind() == reflect.String {
			d.env = append(d.env, envValue{path, text})
		}
	}
	if v.Type() == durationType {
		dur, err := time.ParseDuration(text)
		if err != nil {
			d.fail(path, "want a duration such as 250ms or 5s, got %s", shown)
			return
		}
		v.SetInt(int64(dur))
		d.noteZero(v, path)
		return
	}
	if v.Kind() == reflect.String {
		v.SetString(text)
		return
	}
	// Numbers and booleans: let yaml resolve the expanded text as a scalar.
	if err := yaml.Unmarshal([]byte(text), v.Addr().Interface()); err != nil || text == "" {
		d.fail(path, "want %s, got %s", kindName(v.Kind()), shown)
		return
	}
	d.noteZero(v, path)
}

// noteZero remembers a number or duration decoded as zero, for
// explicitZeros.
func (d *decoder) noteZero(v reflect.Value, path string) {
	if v.Kind() != reflect.Bool && v.IsZero() {
		d.zeros = append(d.zeros, zeroValue{path, v})
	}
}

// expand replaces ${VAR} in s from the environment. An unset variable is an
// error; its value is never echoed, since it may be a secret.
func (d *decoder) expand(s, path string) (string, bool) {
	if !strings.Contains(s, "${") {
		return s, true
	}
	var b strings.Builder
	ok := true
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			d.fail(path, "unterminated ${ in value")
			return "", false
		}
		name := s[i+2 : i+j]
		val, set := d.lookup(name)
		if !validEnvName(name) {
			d.fail(path, "invalid variable name ${%s}", name)
			ok = false
		} else if !set {
			d.fail(path, "environment variable %s is not set", name)
			ok = false
		}
		b.WriteString(s[:i])
		b.WriteString(val)
		s = s[i+j+1:]
	}
	return b.String(), ok
}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		if r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// structFields maps yaml keys to the fields of v, following ",inline" fields.
func structFields(v reflect.Value) map[string]reflect.Value {
	fields := map[string]reflect.Value{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if opts == "inline" {
			for k, f := range structFields(v.Field(i)) {
				fields[k] = f
			}
			continue
		}
		if name != "" && name != "-" {
			fields[name] = v.Field(i)
		}
	}
	return fields
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "an integer"
	}
}
