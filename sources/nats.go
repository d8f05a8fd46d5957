package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// errClosed is returned by Fetch and Ready of a NATS source after Close.
var errClosed = errors.New("nats: source closed")

// natsSetupTimeout bounds the consumer setup NewJetStream attempts, which has
// no ctx of its own, and a flush on Close without a deadline. Fetch sets the
// consumer up again under its own ctx.
const natsSetupTimeout = 5 * time.Second

// natsConn is the connection a NATS source (JetStream or CoreNATS) owns: it
// retries forever in the background, logs each change of state once, and
// never shows credentials.
type natsConn struct {
	nc  *nats.Conn
	url string // the configured URLs without credentials, for errors
	log *slog.Logger
}

// dialNATS connects to url as client name. A server that is down does not
// fail it: the connection keeps retrying in the background, and ready says
// why the source is not ready. With dropsExpected (core NATS), the client's
// slow-consumer notices are logged at debug level only: dropping while the
// bucket is full is the design, and the drops are counted.
func dialNATS(rawURL, name string, wrap func(net.Conn) net.Conn, log *slog.Logger, dropsExpected bool, opts ...nats.Option) (*natsConn, error) {
	c := &natsConn{url: redactURLs(rawURL), log: log}
	opts = append([]nats.Option{
		nats.Name(name),
		nats.SetCustomDialer(wrapDialer{net.Dialer{Timeout: nats.DefaultTimeout}, wrap}),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats: connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close, not a lost connection
			}
			log.Warn("nats: disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if dropsExpected && errors.Is(err, nats.ErrSlowConsumer) {
				// Fires on every episode of a full bucket.
				log.Debug("nats: dropping messages while the bucket is full", "err", err)
				return
			}
			log.Warn("nats: asynchronous error", "err", err)
		}),
	}, opts...)
	nc, err := nats.Connect(rawURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", c.url, err)
	}
	c.nc = nc
	if !nc.IsConnected() {
		log.Warn("nats: server not reachable; retrying in the background", "url", c.url)
	}
	return c, nil
}

// wrapDialer dials a NATS server as nats.go's own dialer does, and wraps
// the connection with wrap when set (NATSConfig.WrapConn: with the conn
// knob on it reads and writes with system calls the Go runtime is not
// told of, so a JetStream ack or a fetch's messages do not wake the
// runtime's monitor thread when the daemon was idle).
type wrapDialer struct {
	d    net.Dialer
	wrap func(net.Conn) net.Conn
}

func (w wrapDialer) Dial(network, addr string) (net.Conn, error) {
	c, err := w.d.Dial(network, addr)
	if err != nil || w.wrap == nil {
		return c, err
	}
	return w.wrap(c), nil
}

// ready returns nil while connected, else why not, such as
// `nats: not connected to nats://127.0.0.1:4222`.
func (c *natsConn) ready() error {
	switch {
	case c.nc.IsClosed():
		return errClosed
	case !c.nc.IsConnected():
		return fmt.Errorf("nats: not connected to %s", c.url)
	}
	return nil
}

// close waits until the server has read what is left to send (Naks,
// InProgress), within ctx, and closes the connection. Nothing is lost if the
// flush fails: what a Nak would have brought back at once comes back after
// AckWait.
func (c *natsConn) close(ctx context.Context) {
	defer c.nc.Close()
	if c.nc.IsClosed() {
		return
	}
	if !c.nc.IsConnected() {
		c.log.Warn("nats: closing while disconnected; unsent acks and naks come back after AckWait")
		return
	}
	if _, ok := ctx.Deadline(); !ok {
		// FlushWithContext insists on a deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, natsSetupTimeout)
		defer cancel()
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		c.log.Warn("nats: flush before close failed; unsent acks and naks come back after AckWait", "err", err)
	}
}

// redactURLs returns the comma-separated NATS URLs in raw without user
// information (a password, or a token in the user position), for errors and
// logs.
func redactURLs(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p // as nats.Connect reads it
		}
		u, err := url.Parse(p)
		if err != nil {
			parts[i] = "(unparsable url)"
			continue
		}
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
