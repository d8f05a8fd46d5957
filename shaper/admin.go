package shaper

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shaper-dev/shaper/internal/check"
)

// maxAdminBody bounds the body of a mutating admin call.
const maxAdminBody = 4 << 10

// maxTop bounds GET /v1/pipelines/{name}/keys?top=N.
const maxTop = 1000

// maxKeysAnswer bounds the body of GET /v1/pipelines/{name}/keys: the
// lanes that do not fit are left out, and the answer says so with the
// header truncatedHeader.
const maxKeysAnswer = 1 << 20

// truncatedHeader is set to "true" on an answer that left out lanes.
const truncatedHeader = "Shaper-Truncated"

// statusPage holds the status page that GET / serves: one HTML, one CSS
// and one JavaScript file, with no build step and nothing fetched from
// elsewhere. The script reads the admin API as any client does.
//
//go:embed statuspage
var statusPage embed.FS

// pageSecurity is the Content-Security-Policy of every admin answer:
// scripts, styles and fetches from the admin port only, no inline script
// or style, no <base>, no form posts, and no framing by any page.
const pageSecurity = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// AdminHosts are the Host headers the admin server answers, against DNS
// rebinding: a page of another site whose name the attacker points at the
// admin address reaches it from a browser behind the firewall, and reads
// the answers, since to the browser they are that site's own. The browser
// sends that name as Host, so the server answers only Hosts it knows to be
// its own. A page that names the server's address (an IP literal) cannot
// read the answers.
type AdminHosts struct {
	// Listen is admin.listen: its host is the server's own name.
	Listen string
	// Allowed is admin.allowed_hosts: further names (or addresses), each
	// with a port (that port only) or without (any port).
	Allowed []string
}

// Allows reports whether the admin server answers a request with Host
// host that arrived on local address local (the zero Addr: not known).
// It does when host, its port aside, is a loopback name or address
// (localhost, 127.0.0.0/8, ::1), the host of Listen, the address local
// (a probe or a scrape by pod IP when listening on every interface), or
// an entry of Allowed; or when there is no Host (HTTP/1.0), which no
// browser sends. Names are compared in any case, without a final dot.
func (h AdminHosts) Allows(host string, local netip.Addr) bool {
	if host == "" {
		return true
	}
	name, port := splitHost(host)
	if check.IsLoopback(name) {
		return true
	}
	if ip, err := netip.ParseAddr(name); err == nil && local.IsValid() && ip.Unmap() == local.Unmap() {
		return true
	}
	if listen, _ := splitHost(h.Listen); listen != "" && listen == name {
		return true
	}
	for _, a := range h.Allowed {
		if an, ap := splitHost(a); an == name && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

// ValidAdminHost reports whether entry is a host name or an IP address,
// with or without :port, as admin.allowed_hosts takes it: no scheme, path,
// user or wildcard.
func ValidAdminHost(entry string) bool {
	name, port := splitHost(entry)
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strings.HasPrefix(port, "0") {
			return false
		}
	} else if strings.HasSuffix(entry, ":") {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return !strings.Contains(name, "%") // no zone: a Host never carries one
	}
	if name == "" || len(name) > 253 || strings.HasPrefix(entry, "[") {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// splitHost splits a Host header (or an admin.listen, or an entry of
// admin.allowed_hosts) into its host, lowercased, without brackets or a
// final dot, and its port ("" when it has none).
func splitHost(hostport string) (name, port string) {
	name = hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		name, port = h, p
	} else {
		name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(name), "."), port
}

// withAllowedHosts answers 421 Misdirected Request to a request whose Host
// hosts does not allow (see AdminHosts), and passes the others to next.
// Every path is checked, /healthz and /metrics too: probes and scrapes by
// loopback, by the address they connect to, or by an allowed name pass.
func withAllowedHosts(hosts AdminHosts, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var local netip.Addr
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if ap, err := netip.ParseAddrPort(a.String()); err == nil {
				local = ap.Addr()
			}
		}
		if !hosts.Allows(r.Host, local) {
			http.Error(w, fmt.Sprintf("shaper admin: Host %q is not a name of this server (refused against DNS rebinding); "+
				"if it is one, add it to admin.allowed_hosts", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Admin returns the handler of the admin API (docs/operations.md) over the pipelines
// that list returns at each call (a reload changes them): the status page
// at GET /, /metrics from gatherer, /healthz, /readyz, GET /v1/pipelines,
// GET /v1/pipelines/{name}/keys, and the changes PUT
// /v1/pipelines/{name}/rate, POST /v1/pipelines/{name}/pause and POST
// /v1/pipelines/{name}/resume.
//
// Mutating calls need "Authorization: Bearer <token>" wherever the server
// listens, loopback included: any process in the same pod or host could
// otherwise push the whole backlog past max_queue_time. With no token
// configured they are refused with 403 and a message saying how to enable
// them. Every accepted change is logged to log with the caller's address and
// the old and new values.
//
// A request whose Host hosts does not allow is answered 421 (see
// AdminHosts).
func Admin(list func() []*Pipeline, gatherer prometheus.Gatherer, token string, hosts AdminHosts, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &adminAPI{list: list, token: token, log: log}
	mux := http.NewServeMux()
	handleStatusPage(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /v1/pipelines", a.pipelines)
	mux.HandleFunc("GET /v1/pipelines/{name}/keys", a.keys)
	mux.HandleFunc("PUT /v1/pipelines/{name}/rate", a.setRate)
	for action, do := range map[string]func(*Pipeline) bool{"pause": (*Pipeline).Pause, "resume": (*Pipeline).Resume} {
		mux.HandleFunc("POST /v1/pipelines/{name}/"+action, a.pauseOrResume(action, do))
	}
	return withSecurityHeaders(withAllowedHosts(hosts, mux))
}

// handleStatusPage serves the status page's files on mux, and an empty
// answer for the icon the page does not have.
func handleStatusPage(mux *http.ServeMux) {
	page, _ := fs.Sub(statusPage, "statuspage") // an embedded directory: Sub cannot fail
	for pattern, file := range map[string]string{
		"GET /{$}":            "index.html",
		"GET /statuspage.css": "statuspage.css",
		"GET /statuspage.js":  "statuspage.js",
	} {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-cache") // an upgraded daemon serves its own page at once
			http.ServeFileFS(w, r, page, file)
		})
	}
	// The page has no icon; answering the browser's request for one with
	// 404 would put an error in the console of every visit.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
}

// adminAPI answers the admin API's calls about pipelines: the pipelines
// list returns at each call, the token that mutating calls need (none: they
// are refused), and the log of accepted changes.
type adminAPI struct {
	list  func() []*Pipeline
	token string
	log   *slog.Logger
}

// readyz answers GET /readyz: 200 when every pipeline is ready, 503 with
// the reason of each one that is not.
func (a *adminAPI) readyz(w http.ResponseWriter, r *http.Request) {
	var notReady []string
	for _, p := range a.list() {
		if err := p.Ready(); err != nil {
			notReady = append(notReady, fmt.Sprintf("%s: %v", p.Name(), err))
		}
	}
	if len(notReady) > 0 {
		http.Error(w, strings.Join(notReady, "\n"), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// pipelines answers GET /v1/pipelines: the Status of every pipeline.
func (a *adminAPI) pipelines(w http.ResponseWriter, r *http.Request) {
	pipelines := a.list()
	out := make([]Status, 0, len(pipelines))
	for _, p := range pipelines {
		out = append(out, p.Status())
	}
	writeJSON(w, http.StatusOK, out)
}

// keys answers GET /v1/pipelines/{name}/keys?top=N: the pipeline's N
// deepest lanes (10 by default), as many as fit in maxKeysAnswer bytes.
func (a *adminAPI) keys(w http.ResponseWriter, r *http.Request) {
	var p *Pipeline
	for _, q := range a.list() {
		if q.Name() == r.PathValue("name") {
			p = q
		}
	}
	if p == nil {
		writeError(w, http.StatusNotFound, fmt.Errorf("no pipeline named %q", r.PathValue("name")))
		return
	}
	top := 10
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxTop {
			writeError(w, http.StatusBadRequest, fmt.Errorf("top: want a number from 1 to %d, got %q", maxTop, v))
			return
		}
		top = n
	}
	body, truncated := keysAnswer(p.Keys(top), maxKeysAnswer)
	if truncated {
		w.Header().Set(truncatedHeader, "true")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body) // the client has gone; nothing to do
}

// setRate answers PUT /v1/pipelines/{name}/rate: it sets the pipeline's
// limit and burst, logs the change and answers the new Status.
func (a *adminAPI) setRate(w http.ResponseWriter, r *http.Request) {
	p := mutable(w, r, a.list, a.token)
	if p == nil {
		return
	}
	body, err := decodeRate(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf(`body: want {"limit": 80, "burst": 1}: %w`, err))
		return
	}
	before := p.Status()
	if err := p.SetRate(body.limit, body.burst); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	after := p.Status()
	a.log.Warn("admin: rate changed", "pipeline", p.Name(), "remote", r.RemoteAddr,
		"old_limit", before.Limit, "limit", after.Limit, "old_burst", before.Burst, "burst", after.Burst)
	writeJSON(w, http.StatusOK, after)
}

// pauseOrResume returns the handler of POST /v1/pipelines/{name}/action,
// which calls do, (*Pipeline).Pause or Resume. The call takes no body;
// calling it twice is not an error (the answer is the status either way),
// and the log says what changed.
func (a *adminAPI) pauseOrResume(action string, do func(*Pipeline) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := mutable(w, r, a.list, a.token)
		if p == nil {
			return
		}
		if do(p) {
			a.log.Warn("admin: pipeline "+action+"d", "pipeline", p.Name(), "remote", r.RemoteAddr)
		}
		writeJSON(w, http.StatusOK, p.Status())
	}
}

// withSecurityHeaders sets on every answer of next the headers that keep
// the status page to itself: pageSecurity, no MIME sniffing, no framing
// (X-Frame-Options for browsers older than frame-ancestors), and no
// Referer sent from the page.
func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", pageSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// mutable returns the pipeline a change names, once the caller is
// authorized; otherwise it answers the request itself and returns nil.
func mutable(w http.ResponseWriter, r *http.Request, list func() []*Pipeline, token string) *Pipeline {
	if !authorized(w, r, token) {
		return nil
	}
	for _, p := range list() {
		if p.Name() == r.PathValue("name") {
			return p
		}
	}
	writeError(w, http.StatusNotFound, fmt.Errorf("no pipeline named %q", r.PathValue("name")))
	return nil
}

// authorized reports whether r may mutate, and answers it when not: 403 when
// no token is configured (mutations are off), 401 when the token is missing
// or wrong.
func authorized(w http.ResponseWriter, r *http.Request, token string) bool {
	switch {
	case token == "":
		writeError(w, http.StatusForbidden, errors.New("changes through the admin API are disabled: "+
			"set admin.token in the config (token: ${SHAPER_ADMIN_TOKEN}, at least 16 bytes) "+
			"and send it as Authorization: Bearer <token>"))
		return false
	case !bearerMatches(r.Header.Get("Authorization"), token):
		w.Header().Set("WWW-Authenticate", `Bearer realm="shaper"`)
		writeError(w, http.StatusUnauthorized, errors.New("a valid bearer token is required"))
		return false
	}
	return true
}

// rateBody is the body of PUT /v1/pipelines/{name}/rate.
type rateBody struct {
	limit float64
	burst int // 0: keep the current burst
}

// decodeRate reads {"limit": 80, "burst": 1} strictly: one JSON object
// with limit (required) and burst, each at most once and spelled exactly so,
// and nothing after it. encoding/json alone would take the last of two
// "limit" keys, "LIMIT" for "limit", and ignore what follows the object.
func decodeRate(r io.Reader) (rateBody, error) {
	var body rateBody
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil {
		return body, err
	} else if tok != json.Delim('{') {
		return body, fmt.Errorf("want a JSON object, got %v", tok)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return body, err
		}
		key, _ := tok.(string) // object keys are strings
		if seen[key] {
			return body, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		switch key {
		case "limit":
			err = dec.Decode(&body.limit)
		case "burst":
			err = dec.Decode(&body.burst)
		default:
			return body, fmt.Errorf("unknown key %q", key)
		}
		if err != nil {
			return body, fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return body, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return body, errors.New("data after the JSON object")
	}
	if !seen["limit"] {
		return body, errors.New("limit is required")
	}
	return body, nil
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

// keysAnswer returns keys as writeJSON writes them, deepest first, with as
// many lanes as fit in limit bytes, and whether any were left out. Each
// key is at most key.max_length bytes, but JSON escapes some bytes as six.
func keysAnswer(keys []KeyStatus, limit int) (body []byte, truncated bool) {
	const open, sep, end = "[\n", ",\n", "\n]\n"
	if len(keys) == 0 {
		return []byte("[]\n"), false
	}
	var b bytes.Buffer
	b.WriteString(open)
	for i, k := range keys {
		lane, _ := json.MarshalIndent(k, "  ", "  ") // a KeyStatus always encodes
		n := len("  ") + len(lane) + len(end)
		if i > 0 {
			n += len(sep)
		}
		if b.Len()+n > limit {
			if i == 0 {
				return []byte("[]\n"), true
			}
			truncated = true
			break
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString("  ")
		b.Write(lane)
	}
	b.WriteString(end)
	return b.Bytes(), truncated
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
