// Command sink is the HTTP sink of the bench's peers section in a process
// of its own, so that every party's requests are timed as a receiver
// would time them, by a process that is none of theirs: it answers 200 to
// every POST /callback once it has read the body, and records when each
// arrived. The harness reads and clears the record between runs:
//
//	GET  /count     how many arrivals are recorded, in decimal
//	GET  /arrivals  each recorded arrival, one per line, in Unix nanoseconds
//	POST /reset     forget every arrival
//
// It prints one line on stdout, its base URL (http://127.0.0.1:port),
// once it listens, writes nothing else there, and runs until SIGTERM or
// SIGINT.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sink:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	r := &record{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /callback", r.callback)
	mux.HandleFunc("GET /count", r.count)
	mux.HandleFunc("GET /arrivals", r.arrivals)
	mux.HandleFunc("POST /reset", r.reset)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1) // Serve's one result, read after Shutdown
	go func() { served <- srv.Serve(ln) }()
	fmt.Println("http://" + ln.Addr().String())
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

// record is the arrivals of the requests answered 200 since the last
// reset. It is safe for concurrent use.
type record struct {
	mu sync.Mutex
	at []int64 // Unix nanoseconds, in the order the handlers took mu
}

// callback answers a party's request. The arrival is when the request
// line and headers have been read: the moment a receiver would start
// counting it against its contract.
func (r *record) callback(w http.ResponseWriter, req *http.Request) {
	at := time.Now().UnixNano()
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.at = append(r.at, at)
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *record) count(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	n := len(r.at)
	r.mu.Unlock()
	fmt.Fprintln(w, n)
}

func (r *record) arrivals(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	at := append([]int64(nil), r.at...)
	r.mu.Unlock()
	bw := bufio.NewWriter(w)
	for _, t := range at {
		bw.WriteString(strconv.FormatInt(t, 10))
		bw.WriteByte('\n')
	}
	_ = bw.Flush() // a harness that hung up reads nothing; nothing to do about it
}

func (r *record) reset(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	r.at = nil
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
