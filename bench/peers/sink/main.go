// Command sink is the HTTP sink of the bench's peers section in a process
// of its own, so that every party's requests are timed as a receiver
// would time them, by a process that is none of theirs: it answers 200 to
// every POST /callback once it has read the body, and records when each
// arrived. The harness reads and clears the record between runs:
//
//	GET  /arrivals  each recorded arrival, one per line: its handler time
//	                and its wire time, in Unix nanoseconds, space apart
//	POST /reset     forget every arrival
//
// An arrival has two times. Its handler time is when this process had read
// the request line and headers: what a receiver's own code would see, late
// by however long the system took to schedule this process. Its wire time
// is the kernel's receive timestamp of the request's first bytes: when
// they reached this host, as a packet capture would show them (0 where
// the system gives none).
//
// With -tls FILE it serves HTTPS (HTTP/1.1) with a certificate for
// 127.0.0.1 it makes at start, and writes that certificate to FILE for
// its clients to trust.
//
// It prints one line on stdout, its base URL (http://127.0.0.1:port, or
// https://), once it listens, writes nothing else there, and runs until SIGTERM or
// SIGINT.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/bench/peers/peer"
)

func main() { peer.Main("sink", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	certFile := fs.String("tls", "", "serve HTTPS, writing the certificate clients must trust to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if err := stampAll(l); err != nil {
		return fmt.Errorf("receive timestamps: %w", err)
	}
	var ln net.Listener = stampingListener{l}
	scheme := "http://"
	if *certFile != "" {
		cfg, err := selfSigned(*certFile)
		if err != nil {
			return err
		}
		ln, scheme = tls.NewListener(ln, cfg), "https://"
	}
	r := &record{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /callback", r.callback)
	mux.HandleFunc("GET /arrivals", r.arrivals)
	mux.HandleFunc("POST /reset", r.reset)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn() // the stamped socket below TLS
		}
		return context.WithValue(ctx, wireKey{}, wireOf(c))
	}}
	served := make(chan error, 1) // Serve's one result, read after Shutdown
	go func() { served <- srv.Serve(ln) }()
	fmt.Println(scheme + ln.Addr().String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// selfSigned makes a key and a self-signed certificate for 127.0.0.1,
// writes the certificate to file, and returns a server config with it
// that offers HTTP/1.1 only.
func selfSigned(file string) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench sink"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}, nil
}

// stampingListener accepts connections whose reads carry the kernel's
// receive timestamps.
type stampingListener struct{ net.Listener }

func (l stampingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return stamped(c), nil
}

// wireKey is the request context's key to its connection's *wireStamp.
type wireKey struct{}

// wireStamp is the receive timestamp of a connection's request being
// served: the first read with data after the last take has it. A party's
// client sends its next request on a connection only once it has the
// answer to the last, so no read of the next one comes before the take.
type wireStamp struct {
	mu   sync.Mutex
	at   int64 // Unix nanoseconds; 0: none since the last take
	seen bool
}

// saw records at, the timestamp of a read with data, if it is the first
// since the last take.
func (w *wireStamp) saw(at int64) {
	w.mu.Lock()
	if !w.seen {
		w.at, w.seen = at, true
	}
	w.mu.Unlock()
}

// take returns the timestamp of the request being served and starts
// looking for the next one's.
func (w *wireStamp) take() int64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	at := w.at
	w.at, w.seen = 0, false
	return at
}

// record is the arrivals of the requests answered 200 since the last
// reset. It is safe for concurrent use.
type record struct {
	mu   sync.Mutex
	at   []int64 // handler times, Unix nanoseconds, in the order the handlers took mu
	wire []int64 // the wire time of each, 0 if there is none
}

// callback answers a party's request, and records its handler time (the
// request line and headers have been read) and its wire time.
func (r *record) callback(w http.ResponseWriter, req *http.Request) {
	at := time.Now().UnixNano()
	wire := req.Context().Value(wireKey{}).(*wireStamp).take()
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.at = append(r.at, at)
	r.wire = append(r.wire, wire)
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *record) arrivals(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	at, wire := slices.Clone(r.at), slices.Clone(r.wire)
	r.mu.Unlock()
	bw := bufio.NewWriter(w)
	for i, t := range at {
		bw.WriteString(strconv.FormatInt(t, 10))
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatInt(wire[i], 10))
		bw.WriteByte('\n')
	}
	_ = bw.Flush() // a harness that hung up reads nothing; nothing to do about it
}

func (r *record) reset(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	r.at, r.wire = nil, nil
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
