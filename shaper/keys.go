package shaper

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// hashedKeyPrefix starts the form a key longer than key.max_length takes.
const hashedKeyPrefix = "sha256:"

// keyFunc returns the function that gives a message its key under k (nil:
// no keys, one lane); dest names a message's destination (nil: the sink
// names none), which is its key under key.from: host. A key longer than
// k.MaxLength (0: the default) is replaced here by shortKey's form, so
// that nothing downstream (lanes, per-key limits, logs, metrics, the admin
// API) holds the long one.
func keyFunc(k *KeyConfig, dest func(*Message) string) func(*Message) string {
	if k == nil {
		return nil
	}
	of := Field(k.From)
	if k.From == "host" {
		of = func(m *Message) (string, bool) {
			if dest == nil {
				return "", false
			}
			name := dest(m)
			return name, name != ""
		}
	}
	maxLen := cmp.Or(k.MaxLength, DefaultMaxKeyLength)
	return func(m *Message) string {
		if key, ok := of(m); ok {
			return shortKey(key, maxLen)
		}
		return k.Missing
	}
}

// shortKey returns key when it is at most maxLen bytes, else "sha256:" and
// the hex of the SHA-256 of the whole key: the same long key gives the
// same short one, and so the same lane.
func shortKey(key string, maxLen int) string {
	if len(key) <= maxLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedKeyPrefix + hex.EncodeToString(sum[:])
}

// Field returns the function that reads one value of a message, as from
// says: "kafka_key" (the message key), "header:NAME" (the first value of
// header NAME, in any case), or "json:a.b.c" (a dot path into a JSON object
// payload: a string as it is, a number or a boolean as its JSON text). The
// function reports false when the message has no such value. from must
// have been validated (key.from, sink.http.url_from); any other from gives
// a function that finds nothing.
func Field(from string) func(*Message) (string, bool) {
	kind, arg, _ := strings.Cut(from, ":")
	switch {
	case from == "kafka_key":
		return func(m *Message) (string, bool) { return string(m.Key), len(m.Key) > 0 }
	case kind == "header":
		return func(m *Message) (string, bool) { return headerValue(m.Header, arg) }
	case kind == "json":
		path := strings.Split(arg, ".")
		return func(m *Message) (string, bool) { return jsonValue(m.Payload, path) }
	}
	return func(*Message) (string, bool) { return "", false }
}

// destinationOf returns what names a message's destination: the sink's
// Destination, or nil when the sink names none.
func destinationOf(s Sink) func(*Message) string {
	if d, ok := s.(Destinations); ok {
		return d.Destination
	}
	return nil
}

// destinationOfTask returns what names the destination of a message whose
// lane key is key: its sink's name for it, or "" (one destination).
func destinationOfTask(s Sink) func(m *Message, key string) string {
	of := destinationOf(s)
	if of == nil {
		return nil
	}
	return func(m *Message, _ string) string { return of(m) }
}

// headerValue returns the first value of header name, matched exactly or,
// failing that, in any case (HTTP and NATS header names differ in case).
func headerValue(h map[string][]string, name string) (string, bool) {
	if vs := h[name]; len(vs) > 0 {
		return vs[0], true
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}

// jsonValue returns the value at path in a JSON object payload: a string
// as it is, a number or a boolean as its JSON text; false for anything
// else (no such path, null, an object, an array, a payload that is not
// JSON).
func jsonValue(payload []byte, path []string) (string, bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return "", false
	}
	for _, step := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = obj[step]; !ok {
			return "", false
		}
	}
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	}
	return "", false
}
