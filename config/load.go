package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shaper-dev/shaper/internal/check"
	"go.yaml.in/yaml/v3"
)

// Load reads a config file, replaces ${VAR} from the environment, applies the
// defaults and validates the result. The error lists every problem found in
// one pass, each with its place in the file and its key path
// (shaper.yaml:12:7: pipelines[0].rate.limit: must be a number > 0).
//
// In a value, ${VAR} is the variable's value and an unset variable is a
// problem; ${VAR:-default} is default when VAR is unset or empty, as in a
// POSIX shell; $${ is a literal ${.
func Load(path string) (*File, error) {
	cfg, _, err := LoadWith(path, Options{})
	return cfg, err
}

// Options change what LoadWith checks.
type Options struct {
	// SkipEnv leaves a value that names an unset ${VAR} (without a
	// :-default) unchecked instead of failing, so that CI can check a
	// config without its secrets. The File then holds placeholders, not
	// values to run with.
	SkipEnv bool
}

// LoadWith is Load with opts. Its unchecked lists, placed like the
// problems, each value that SkipEnv left unchecked:
//
//	shaper.yaml:33:11: pipelines[0].sink.http.headers.Authorization: ${PSP_TOKEN} is not set: not checked
func LoadWith(path string, opts Options) (cfg *File, unchecked []string, err error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	return parse(path, data, os.LookupEnv, opts)
}

// ErrNotRegular is the error of a config path that is not a regular file
// (a named pipe, a directory, a device, a socket), or a symbolic link to
// one: it is refused without being read.
var ErrNotRegular = errors.New("not a regular file")

// readFile reads the config file at path, at most MaxConfigBytes+1 bytes.
// A path that is not a regular file is refused at once, before it is
// opened: reading a named pipe would wait for a writer for good. The open
// does not block either (O_NONBLOCK), and what it opened is checked again,
// so a pipe put in place between the two checks is refused too.
func readFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := regular(path, info); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := regular(path, info); err != nil {
		return nil, err
	}
	// One byte more than the cap tells a file at the cap from a larger one.
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return data, nil
}

// regular returns an ErrNotRegular naming what path is, unless info says
// it is a regular file.
func regular(path string, info fs.FileInfo) error {
	m := info.Mode()
	var what string
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeCharDevice != 0:
		what = "a character device"
	case m&fs.ModeDevice != 0:
		what = "a block device"
	default:
		what = "mode " + m.String()
	}
	return fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, what)
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
	cfg, _, err := parse("", data, lookup, Options{})
	return cfg, err
}

// parse is LoadWith on the bytes of the file called name ("" for none).
//
// It is one pass: what does not decode (an unknown key, a wrong type, an
// unset ${VAR}) is reported together with what does not validate, except
// the validation problems at or below a key that did not decode, which
// would only repeat it, and those at or below a key left unchecked.
func parse(name string, data []byte, lookup func(string) (string, bool), opts Options) (*File, []string, error) {
	if len(data) > MaxConfigBytes {
		return nil, nil, fmt.Errorf("config: larger than %d bytes (4 MiB): not read", MaxConfigBytes)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	var cfg File
	d := decoder{lookup: lookup, skipEnv: opts.SkipEnv, places: map[string]*yaml.Node{}, failed: map[string]bool{}, unchecked: map[string]bool{}}
	if len(root.Content) > 0 {
		d.decode(root.Content[0], reflect.ValueOf(&cfg).Elem(), "")
	}
	cfg.SetDefaults()
	errs := append(d.errs, d.explicitZeros()...)
	for _, e := range check.Flatten(cfg.Validate()) {
		if !d.below(d.failed, e) && !d.below(d.unchecked, e) {
			errs = append(errs, e)
		}
	}
	var unchecked []string
	for _, e := range d.placed(name, d.notes) {
		unchecked = append(unchecked, e.Error())
	}
	if len(errs) > 0 {
		return nil, unchecked, capped(d.placed(name, d.scrub(errs)))
	}
	return &cfg, unchecked, nil
}

// below reports whether a validation problem lies at or below a key path
// in paths.
func (d *decoder) below(paths map[string]bool, e error) bool {
	path, _, _ := strings.Cut(e.Error(), ": ")
	for p := path; p != ""; p = parentPath(p) {
		if paths[p] {
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
	// skipEnv leaves values with an unset ${VAR} unchecked (Options.SkipEnv):
	// unchecked holds their key paths, notes says which variable each lacks.
	skipEnv   bool
	unchecked map[string]bool
	notes     []error
	errs      []error
	env       []envValue // string values that took something from the environment
	nodes     int        // nodes decoded so far, aliases expanded
	zeros     []zeroValue
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
				d.fail(kpath, "unknown key%s", didYouMean(key, fields))
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
	x, ok := d.expand(n.Value, path)
	if !ok {
		return
	}
	text := x.text
	if x.unset {
		// A variable is unset and SkipEnv is on. A string keeps the value
		// as written (${PSP_TOKEN}), not "": a rule that only asks for a
		// value (a token required off loopback, url or url_from) holds as
		// it will once the variable is set, while the problems at this
		// key path itself, which would judge a value not known here, are
		// dropped (decoder.unchecked). Another type stays unset, as if
		// left out, for the same reason.
		if v.Kind() == reflect.String {
			v.SetString(text)
		}
		return
	}
	shown := fmt.Sprintf("%q", text)
	if x.fromEnv {
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
	if err := yaml.Unmarshal([]byte(text), v.Addr().Interface()); err != nil || text == "" || v.CanInt() && !isInteger(text) {
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

// expansion is a value with its ${VAR}s replaced.
type expansion struct {
	text string
	// fromEnv: some of text is a variable's value, which may be a secret.
	fromEnv bool
	// unset: with skipEnv, a variable was unset; text keeps it as written.
	unset bool
}

// expand replaces ${VAR} in s from the environment, and ${VAR:-default}
// with default when VAR is unset or empty; $${ is a literal ${. An unset
// variable without a default is an error, or with skipEnv a note that the
// value is not checked; a value is never echoed, since it may be a secret.
func (d *decoder) expand(s, path string) (expansion, bool) {
	if !strings.Contains(s, "${") {
		return expansion{text: s}, true
	}
	var x expansion
	var b strings.Builder
	ok := true
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			break
		}
		if i > 0 && s[i-1] == '$' {
			b.WriteString(s[:i-1] + "${")
			s = s[i+2:]
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			d.fail(path, "unterminated ${ in value")
			return expansion{}, false
		}
		ref := s[i : i+j+1]
		name, def, hasDef := strings.Cut(ref[2:len(ref)-1], ":-")
		val, set := d.lookup(name)
		switch {
		case !validEnvName(name):
			d.fail(path, "invalid variable name ${%s}", name)
			ok = false
		case hasDef && strings.Contains(def, "${"):
			d.fail(path, "${%s:-...}: a default must not hold ${ (variables do not nest); write $${ for a literal ${", name)
			ok = false
		case hasDef && val == "":
			val = def
		case !set && d.skipEnv:
			d.notes = append(d.notes, fmt.Errorf("%s: ${%s} is not set: not checked", pathOrRoot(path), name))
			d.unchecked[pathOrRoot(path)] = true
			x.unset = true
			val = ref
		case !set:
			d.fail(path, "environment variable %s is not set", name)
			ok = false
		default:
			x.fromEnv = true
		}
		b.WriteString(s[:i])
		b.WriteString(val)
		s = s[i+j+1:]
	}
	x.text = b.String()
	return x, ok
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

// isInteger reports whether text is an integer as YAML reads it: yaml
// decodes 100.5 into an int as 100, which would make capacity: 100.5 a
// capacity of 100.
func isInteger(text string) bool {
	var x any
	if err := yaml.Unmarshal([]byte(text), &x); err != nil {
		return false
	}
	switch x.(type) {
	case int, int64, uint64:
		return true
	}
	return false
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

// didYouMean returns ` (did you mean "bucket"?)` for an unknown key that
// is one slip away from a known one of known (a case difference, or one
// letter added, dropped, changed, or swapped with the next), or "" when
// none is. Further slips would suggest keys that were never meant.
func didYouMean(key string, known map[string]reflect.Value) string {
	var near []string
	for k := range known {
		if strings.EqualFold(k, key) || oneEditApart(k, key) {
			near = append(near, strconv.Quote(k))
		}
	}
	if len(near) == 0 {
		return ""
	}
	slices.Sort(near)
	return " (did you mean " + strings.Join(near, " or ") + "?)"
}

// oneEditApart reports whether a and b differ by exactly one edit of the
// optimal string alignment (Damerau-Levenshtein) distance: a byte added,
// dropped or changed, or two adjacent bytes swapped.
func oneEditApart(a, b string) bool {
	if len(a) < len(b) {
		a, b = b, a
	}
	switch len(a) - len(b) {
	case 0:
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		if i == len(a) {
			return false // equal
		}
		if a[i+1:] == b[i+1:] {
			return true // changed
		}
		return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:] // swapped
	case 1:
		i := 0
		for i < len(b) && a[i] == b[i] {
			i++
		}
		return a[i+1:] == b[i:] // a has one more byte, at i
	}
	return false
}
