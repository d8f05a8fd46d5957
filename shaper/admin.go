package shaper

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxAdminBody bounds the body of a mutating admin call.
const maxAdminBody = 4 << 10

// Admin returns the handler of the admin API (SPEC §5) over the pipelines
// that list returns at each call (a reload changes them): /metrics from
// gatherer, /healthz, /readyz, GET /v1/pipelines and
// PUT /v1/pipelines/{name}/rate. When token is not empty, PUT requires
// "Authorization: Bearer <token>".
func Admin(list func() []*Pipeline, gatherer prometheus.Gatherer, token string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		var notReady []string
		for _, p := range list() {
			if err := p.Ready(); err != nil {
				notReady = append(notReady, fmt.Sprintf("%s: %v", p.Name(), err))
			}
		}
		if len(notReady) > 0 {
			http.Error(w, strings.Join(notReady, "\n"), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /v1/pipelines", func(w http.ResponseWriter, r *http.Request) {
		pipelines := list()
		out := make([]Status, 0, len(pipelines))
		for _, p := range pipelines {
			out = append(out, p.Status())
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("PUT /v1/pipelines/{name}/rate", func(w http.ResponseWriter, r *http.Request) {
		if token != "" && !bearerMatches(r.Header.Get("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shaper"`)
			writeError(w, http.StatusUnauthorized, errors.New("a valid bearer token is required"))
			return
		}
		var p *Pipeline
		for _, q := range list() {
			if q.Name() == r.PathValue("name") {
				p = q
			}
		}
		if p == nil {
			writeError(w, http.StatusNotFound, fmt.Errorf("no pipeline named %q", r.PathValue("name")))
			return
		}
		var body struct {
			Limit *float64 `json:"limit"`
			Burst int      `json:"burst"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("body: want {\"limit\": 80, \"burst\": 1}: %v", err))
			return
		}
		if body.Limit == nil {
			writeError(w, http.StatusBadRequest, errors.New("body: limit is required"))
			return
		}
		if err := p.SetRate(*body.Limit, body.Burst); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, http.StatusOK, p.Status())
	})
	return mux
}

// bearerMatches reports whether header is "Bearer <token>" (the scheme in
// any case, RFC 9110 section 11.1). It compares SHA-256 digests in constant
// time: comparing the tokens themselves would return early on a length
// mismatch and tell the token's length.
func bearerMatches(header, token string) bool {
	scheme, got, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client has gone; nothing to do
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
