package tuning

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testwait"
)

// pair returns a wrapped client connection and the server's end of it,
// over loopback, closed when the test ends.
func pair(t *testing.T) (client net.Conn, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		c.Close()
		t.FailNow()
	}
	client = wrapRaw(c)
	t.Cleanup(func() { client.Close(); s.Close() })
	return client, s
}

func TestWrapTakesTCPAndLeavesWhatHasNoSocketOfItsOwn(t *testing.T) {
	c, _ := pair(t)
	_, raw := c.(*RawConn)
	if want := runtime.GOOS == "linux"; raw != want {
		t.Errorf("Wrap(TCP) is a *Conn: %v; want %v on %s", raw, want, runtime.GOOS)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if got := wrapRaw(p1); got != p1 {
		t.Errorf("Wrap(pipe) = %T; want the pipe itself", got)
	}
}

// What goes one way comes out the other, byte for byte, in both
// directions at once, and a write larger than the socket's buffers waits
// in the poller for the reader instead of failing or spinning.
func TestReadAndWriteCarryEveryByteBothWaysAtOnce(t *testing.T) {
	c, s := pair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	var wg sync.WaitGroup
	var fromServer []byte
	var readErr error
	wg.Add(3)
	go func() { // the server sends big while it reads what the client sends
		defer wg.Done()
		if _, err := s.Write(big); err != nil {
			t.Errorf("server Write: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		got := make([]byte, len(big))
		if _, err := io.ReadFull(s, got); err != nil {
			t.Errorf("server read: %v", err)
		} else if !bytes.Equal(got, big) {
			t.Error("the server read other bytes than the client wrote")
		}
	}()
	go func() {
		defer wg.Done()
		fromServer = make([]byte, len(big))
		_, readErr = io.ReadFull(c, fromServer)
	}()
	n, err := c.Write(big)
	if err != nil || n != len(big) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(big))
	}
	wg.Wait()
	if readErr != nil || !bytes.Equal(fromServer, big) {
		t.Errorf("client read: %v, equal %v; want every byte", readErr, bytes.Equal(fromServer, big))
	}
	if n, err := c.Write(nil); n != 0 || err != nil {
		t.Errorf("Write(nil) = %d, %v; want 0, nil", n, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Errorf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

// The errors are net.Conn's: io.EOF when the peer closes, a timeout at the
// deadline, net.ErrClosed after Close, each but EOF in a *net.OpError
// naming the operation.
func TestErrorsAreThoseOfNetConn(t *testing.T) {
	c, s := pair(t)
	buf := make([]byte, 16)

	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(buf)
	var op *net.OpError
	var ne net.Error
	if !errors.As(err, &op) || op.Op != "read" || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("Read past its deadline: %v; want a read *net.OpError that is a timeout", err)
	}
	_ = c.SetReadDeadline(time.Time{})

	if _, err := s.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	got, err := io.ReadAll(c)
	if string(got) != "last" || err != nil {
		t.Errorf("ReadAll after the peer closed = %q, %v; want \"last\", nil (io.EOF ends it)", got, err)
	}
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("Read after EOF = %d, %v; want 0, io.EOF", n, err)
	}

	// Writing to a peer that is gone fails once the reset comes back.
	var werr error
	testwait.Every(time.Millisecond, 10*time.Second, func() bool {
		_, werr = c.Write([]byte("x"))
		return werr != nil
	})
	if !errors.As(werr, &op) || op.Op != "write" {
		t.Errorf("Write to a closed peer: %v; want a write *net.OpError", werr)
	}

	c.Close()
	if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v; want net.ErrClosed", err)
	}
	if _, err := c.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v; want net.ErrClosed", err)
	}
}

// Close ends a Read that waits for data, as net.Conn's does.
func TestCloseEndsAWaitingRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	if rc, ok := c.(*RawConn); ok {
		testwait.For(t, 10*time.Second, "the Read to begin", func() bool { return reading(rc) })
	}
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read ended by Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read still waits 10s after Close")
	}
}
