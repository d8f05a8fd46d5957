package shaper

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads a config file, replaces ${VAR} from the environment, applies the
// defaults and validates the result. The error lists every problem, each
// prefixed by its key path (pipelines[0].rate.limit: must be > 0).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, os.LookupEnv)
}

// Parse is Load on the bytes of a config file, with lookup standing in for
// the environment.
func Parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg Config
	d := decoder{lookup: lookup}
	if len(root.Content) > 0 {
		d.decode(root.Content[0], reflect.ValueOf(&cfg).Elem(), "")
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// decoder walks a YAML tree beside the Go value it fills, so that every
// problem (an unknown key, a wrong type, an unset ${VAR}) is reported with its
// key path, all at once, instead of yaml's first error with a line number.
type decoder struct {
	lookup func(string) (string, bool)
	errs   []error
}

var durationType = reflect.TypeOf(time.Duration(0))

func (d *decoder) fail(path, format string, args ...any) {
	d.errs = append(d.errs, fmt.Errorf("%s: %s", pathOrRoot(path), fmt.Sprintf(format, args...)))
}

func pathOrRoot(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
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
			kpath := join(path, key)
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
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
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
			d.decode(n.Content[i+1], val, join(path, key))
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
	}
	if v.Type() == durationType {
		dur, err := time.ParseDuration(text)
		if err != nil {
			d.fail(path, "want a duration such as 250ms or 5s, got %s", shown)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	if v.Kind() == reflect.String {
		v.SetString(text)
		return
	}
	// Numbers and booleans: let yaml resolve the expanded text as a scalar.
	if err := yaml.Unmarshal([]byte(text), v.Addr().Interface()); err != nil || text == "" {
		d.fail(path, "want %s, got %s", kindName(v.Kind()), shown)
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
