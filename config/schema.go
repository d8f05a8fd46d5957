package config

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sources"
	"github.com/shaper-dev/shaper/webhook"
)

//go:generate go test -run TestSchemaCommentsAreCurrent -update .

// Schema returns the JSON Schema (draft 2020-12) of a config file, for
// editors (yaml-language-server) and for tools that check a file before
// shaper does. It is reflected from File: a key for each yaml tag, the
// field's doc comment as its description (from schemaComments, generated
// from the source, since a binary has none), so it cannot drift from what
// Load reads. What the Go types cannot say is in schemaKeys and
// schemaChoices, next to the constants it names.
//
// The schema is a little looser than Load where the rule needs more than
// one key or a value's meaning (a limit within bounds, a duration of at
// most 7 days, a token off loopback): `shaper validate` has the last word. A number, a boolean or
// a duration may also be a string that names a ${VAR}.
func Schema() ([]byte, error) {
	r := &jsonschema.Reflector{
		Anonymous:                  true,
		ExpandedStruct:             true,
		FieldNameTag:               "yaml",
		RequiredFromJSONSchemaTags: true, // required comes from schemaKeys
		Namer:                      schemaName,
		Mapper:                     scalarSchema,
		LookupComment:              schemaComment,
	}
	s := r.Reflect(&File{})
	s.Title = "shaper config file"
	s.Definitions["duration"] = durationSchema()
	s.Definitions["env"] = &jsonschema.Schema{
		Type: "string", Pattern: envPattern,
		Description: "a value taken from the environment: ${VAR}, or ${VAR:-default} when VAR is unset or empty",
	}
	if err := applySchemaFacts(s); err != nil {
		return nil, err
	}
	return json.MarshalIndent(s, "", "  ")
}

// envPattern matches a string that names a ${VAR} (${VAR:-default} too).
const envPattern = `\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}$]*)?\}`

// durationForms are the Go durations Load reads (time.ParseDuration):
// 250ms, 1m30s, 1.5h, 0. A negative one is never valid in a config.
const durationForms = `0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+`

// orEnv is the pattern of a string that is one of forms (a regular
// expression of alternatives) or names a ${VAR}.
func orEnv(forms string) string {
	return "^(" + forms + ")$|" + envPattern
}

// schemaName names a definition by package and type (sources.KafkaConfig),
// since two packages have a KafkaConfig.
func schemaName(t reflect.Type) string {
	if t.Name() == "" || t.PkgPath() == "" {
		return ""
	}
	return path.Base(t.PkgPath()) + "." + t.Name()
}

// scalarSchema is the schema of a Go duration, number or boolean: the
// value, or a string with a ${VAR} that Load replaces before it decodes.
// It returns nil for the other types, which reflect as they are.
func scalarSchema(t reflect.Type) *jsonschema.Schema {
	if t == durationType {
		return &jsonschema.Schema{Ref: "#/$defs/duration"}
	}
	var kind string
	switch t.Kind() {
	case reflect.Bool:
		kind = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		kind = "integer"
	case reflect.Float32, reflect.Float64:
		kind = "number"
	default:
		return nil
	}
	// pattern applies to strings only: a string must name a ${VAR}.
	return &jsonschema.Schema{Pattern: envPattern, Extras: map[string]any{"type": []string{kind, "string"}}}
}

// durationSchema is a Go duration as a string (5s), or 0, or a string with
// a ${VAR}. minimum and maximum apply to numbers only: the only number is 0.
func durationSchema() *jsonschema.Schema {
	zero := json.Number("0")
	return &jsonschema.Schema{
		Pattern:     orEnv(durationForms),
		Minimum:     zero,
		Maximum:     zero,
		Extras:      map[string]any{"type": []string{"string", "integer"}},
		Description: "a Go duration: a number and a unit (ns, us, ms, s, m, h), several summed (1m30s); 0 alone",
		Examples:    []any{"250ms", "5s", "1m30s"},
	}
}

// schemaComment is a type's or a field's doc comment (schemaComments, as
// github.com/invopop/jsonschema keys them), its lines unwrapped into
// paragraphs.
func schemaComment(t reflect.Type, field string) string {
	key := t.PkgPath() + "." + t.Name()
	if field != "" {
		key += "." + field
	}
	return unwrap(schemaComments[key])
}

var lineBreak = regexp.MustCompile(`([^\n])\n([^\n])`)

// unwrap joins the lines of each paragraph of a comment.
func unwrap(comment string) string {
	return lineBreak.ReplaceAllString(comment, "$1 $2")
}

// keyFacts is what the schema says of one key beyond its Go type.
type keyFacts struct {
	required bool     // present whenever its mapping is
	enum     []string // the only values (or a ${VAR})
	pattern  string   // alternatives a string value matches whole (or a ${VAR})
	minItems uint64   // for a list: at least this many
	maximum  int64    // for an integer: at most this (0: no bound)
}

// The forms of key.from and sink.http.url_from (shaper.ValidField), as
// keyFacts.pattern.
const (
	urlFromForms = `header:[^\s:]+|json:[^.]+(\.[^.]+)*`
	keyFromForms = `kafka_key|host|` + urlFromForms
)

// schemaKeys are the facts of the keys, by the Go field that declares
// each (package.Type.Field): a key of an inlined struct (kafkaconn.Config
// in every Kafka mapping) gets them wherever it is inlined. Schema fails on
// a field that is not a key of the file, so a renamed field cannot leave a
// fact behind.
var schemaKeys = map[string]keyFacts{
	"config.File.Pipelines":               {required: true, minItems: 1},
	"config.File.Tuning":                  {enum: []string{tuning.On, tuning.Off}},
	"config.Pipeline.Name":                {required: true},
	"config.Pipeline.Source":              {required: true},
	"config.Pipeline.Rate":                {required: true},
	"config.Pipeline.Sink":                {required: true},
	"shaper.RateConfig.Mode":              {enum: []string{shaper.ModeLeaky, shaper.ModeToken}},
	"shaper.RateConfig.Limit":             {required: true},
	"shaper.PerKeyRate.Limit":             {required: true},
	"shaper.BucketConfig.Capacity":        {maximum: shaper.MaxCapacity},
	"shaper.BucketConfig.OnExpire":        {enum: []string{shaper.OnExpireDeadLetter, shaper.OnExpireDrop, shaper.OnExpireDeliver}},
	"shaper.KeyConfig.From":               {required: true, pattern: keyFromForms},
	"kafkaconn.Config.Brokers":            {required: true, minItems: 1},
	"kafkaconn.SASLConfig.Mechanism":      {required: true, enum: []string{kafkaconn.SASLPlain, kafkaconn.SASLScramSHA256, kafkaconn.SASLScramSHA512}},
	"kafkaconn.SASLConfig.Username":       {required: true},
	"kafkaconn.SASLConfig.Password":       {required: true},
	"tlsconf.Config.MinVersion":           {enum: []string{tlsconf.Version12, tlsconf.Version13}},
	"sources.KafkaConfig.Topic":           {required: true},
	"sources.KafkaConfig.Group":           {required: true},
	"sources.KafkaConfig.Start":           {enum: []string{sources.StartEarliest, sources.StartLatest}},
	"sources.NATSConfig.URL":              {required: true},
	"sources.NATSConfig.Subject":          {required: true},
	"sinks.HTTPConfig.URLFrom":            {pattern: urlFromForms},
	"sinks.SigningConfig.Scheme":          {enum: []string{string(webhook.Standard), string(webhook.Shaper)}},
	"sinks.SigningConfig.Secret":          {required: true},
	"sinks.NATSPublisherConfig.URL":       {required: true},
	"sinks.NATSPublisherConfig.Subject":   {required: true},
	"sinks.KafkaPublisherConfig.Topic":    {required: true},
	"limiter.SharedOptions.Redis":         {required: true},
	"limiter.SharedOptions.FallbackLimit": {required: true},
}

// schemaChoices are the mappings that take exactly one of some keys, by
// type.
var schemaChoices = map[string][]string{
	"config.Source":       {"kafka", "nats"},
	"config.Sink":         {"http", "kafka", "nats"},
	"config.DeadLetter":   {"kafka", "nats"},
	"sinks.HTTPConfig":    {"url", "url_from"},
	"limiter.RedisConfig": {"addr", "addrs"},
}

// schemaNeeds are keys that need another in the same mapping, by type:
// the key, then the keys it needs.
var schemaNeeds = map[string]map[string][]string{
	"sinks.HTTPConfig": {"url_from": {"allowed_hosts"}},
}

// applySchemaFacts adds schemaKeys, schemaChoices and schemaNeeds to the
// definitions of s, and fails on any that names no key.
func applySchemaFacts(s *jsonschema.Schema) error {
	used := map[string]bool{}
	defs := map[string]*jsonschema.Schema{"config.File": s}
	for name, d := range s.Definitions {
		defs[name] = d
	}
	for name, d := range defs {
		t, ok := schemaTypes[name]
		if !ok || d.Properties == nil {
			continue
		}
		if err := applyKeyFacts(name, t, d, used); err != nil {
			return err
		}
		if err := applyChoices(name, d, used); err != nil {
			return err
		}
		if err := applyNeeds(name, d, used); err != nil {
			return err
		}
	}
	return checkFactsUsed(used)
}

// applyKeyFacts adds to d, the definition of the Go struct t named name,
// the schemaKeys of its keys, and marks in used each field whose facts it
// adds. It fails on a key that no Go field of t declares.
func applyKeyFacts(name string, t reflect.Type, d *jsonschema.Schema, used map[string]bool) error {
	for pair := d.Properties.Oldest(); pair != nil; pair = pair.Next() {
		decl, ok := declaringField(t, pair.Key)
		if !ok {
			return fmt.Errorf("config: schema: %s.%s: no Go field has this key", name, pair.Key)
		}
		facts, ok := schemaKeys[decl]
		if !ok {
			continue
		}
		used[decl] = true
		facts.apply(d, pair.Key, pair.Value)
	}
	return nil
}

// apply writes the facts into p, the schema of key, and d, the schema of
// the mapping that holds it.
func (facts keyFacts) apply(d *jsonschema.Schema, key string, p *jsonschema.Schema) {
	if facts.required {
		d.Required = append(d.Required, key)
	}
	if facts.minItems > 0 {
		p.MinItems = &facts.minItems
	}
	if facts.maximum > 0 {
		p.Maximum = json.Number(strconv.FormatInt(facts.maximum, 10))
	}
	if facts.pattern != "" {
		p.Pattern = orEnv(facts.pattern)
	}
	if facts.enum != nil {
		values := make([]any, len(facts.enum))
		for i, v := range facts.enum {
			values[i] = v
		}
		p.Type = ""
		p.AnyOf = []*jsonschema.Schema{{Type: "string", Enum: values}, {Ref: "#/$defs/env"}}
	}
}

// applyChoices adds to d, the definition named name, the schemaChoices of
// that mapping as a oneOf, and marks them in used. It fails on a choice
// that is not a key of d.
func applyChoices(name string, d *jsonschema.Schema, used map[string]bool) error {
	keys := schemaChoices[name]
	if keys == nil {
		return nil
	}
	used[name] = true
	for _, k := range keys {
		if _, ok := d.Properties.Get(k); !ok {
			return fmt.Errorf("config: schema: %s: exactly one of %v: no key %s", name, keys, k)
		}
		d.OneOf = append(d.OneOf, &jsonschema.Schema{Required: []string{k}})
	}
	return nil
}

// applyNeeds adds to d, the definition named name, the schemaNeeds of that
// mapping as dependentRequired, and marks them in used. It fails on a key
// that is not a key of d.
func applyNeeds(name string, d *jsonschema.Schema, used map[string]bool) error {
	for k, needs := range schemaNeeds[name] {
		used[name+"."+k] = true
		for _, n := range append([]string{k}, needs...) {
			if _, ok := d.Properties.Get(n); !ok {
				return fmt.Errorf("config: schema: %s: %s needs %v: no key %s", name, k, needs, n)
			}
		}
		if d.DependentRequired == nil {
			d.DependentRequired = map[string][]string{}
		}
		d.DependentRequired[k] = needs
	}
	return nil
}

// checkFactsUsed fails on a fact of schemaKeys, schemaChoices or
// schemaNeeds that used does not mark: it names a key or a mapping the
// file does not have.
func checkFactsUsed(used map[string]bool) error {
	for decl := range schemaKeys {
		if !used[decl] {
			return fmt.Errorf("config: schema: %s is not a key of the file", decl)
		}
	}
	for name := range schemaChoices {
		if !used[name] {
			return fmt.Errorf("config: schema: %s is not a mapping of the file", name)
		}
	}
	for name, needs := range schemaNeeds {
		for k := range needs {
			if !used[name+"."+k] {
				return fmt.Errorf("config: schema: %s is not a mapping of the file", name)
			}
		}
	}
	return nil
}

// schemaTypes are the struct types of the file by schemaName.
var schemaTypes = func() map[string]reflect.Type {
	types := map[string]reflect.Type{}
	for _, t := range fileStructs() {
		types[schemaName(t)] = t
	}
	return types
}()

// fileStructs returns every struct type a config file is made of, File
// first, inlined ones included.
func fileStructs() []reflect.Type {
	var out []reflect.Type
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		out = append(out, t)
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "-" {
				walk(t.Field(i).Type)
			}
		}
	}
	walk(reflect.TypeOf(File{}))
	return out
}

// declaringField returns the Go field (package.Type.Field) that declares
// the yaml key of struct t, looking into inlined structs.
func declaringField(t reflect.Type, key string) (string, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opts == "inline" {
			if decl, ok := declaringField(f.Type, key); ok {
				return decl, true
			}
			continue
		}
		if name == key {
			return schemaName(t) + "." + f.Name, true
		}
	}
	return "", false
}
