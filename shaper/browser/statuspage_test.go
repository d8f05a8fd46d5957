package browser_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// The status page, in headless Chromium, over a real pipeline (embedded
// JetStream to a recording HTTP sink, with lanes per key) and traffic: it
// shows the pipeline running, a delivered rate above 0 within 3s of the
// first delivery, the deepest keys; a pause without the token is refused
// by the server and the page says so; with the token typed in, pause shows
// paused and the sink gets nothing more, and resume starts deliveries
// again. The page writes no error to the console and throws nothing.
func TestStatusPageShowsTrafficAndPausesOnlyWithTheToken(t *testing.T) {
	const token = "status-page-token-0123456789"
	natsURL := jetStream(t)
	rec := sinktest.Start(t, sinktest.OK)
	p, admin := startPipeline(t, natsURL, rec.URL, token, func(c *config.Pipeline) {
		c.Rate.Limit = 50
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
	})
	tab := openBrowser(t)

	resp := tab.navigate(admin.URL + "/")
	if csp := resp.Headers["Content-Security-Policy"]; resp.Status != 200 || !strings.Contains(fmt.Sprint(csp), "default-src 'self'") {
		t.Fatalf("GET / in the browser = %d, CSP %v; want 200 with default-src 'self'", resp.Status, csp)
	}
	const cardCSS = `section.pipeline[data-pipeline="test"]`
	const card = `document.querySelector('` + cardCSS + `')`
	tab.waitFor("the card of pipeline test, running", 10*time.Second, card+`?.dataset.state === "running"`)

	for _, key := range []string{"m-1", "m-2", "m-3"} {
		natstest.PublishKeyed(t, natsURL, subject, "Merchant-Id", key, 300) // 18s of traffic at 50/s: it outlasts the test
	}
	testwait.For(t, 10*time.Second, "the first delivery", func() bool { return rec.DeliveredCount() > 0 })
	first := rec.Requests()[0].At
	deliveredRate := card + `.querySelector('.chart').dataset.deliveredPerSecond`
	tab.waitFor("a delivered rate above 0, drawn, within 3s of the first delivery", time.Until(first.Add(3*time.Second)),
		`Number(`+deliveredRate+`) > 0 && `+card+`.querySelector('.delivered-line').points.numberOfItems > 0`)
	t.Logf("the page showed a delivered rate %v after the first delivery", time.Since(first).Round(time.Millisecond))
	tab.waitFor("the deepest keys m-1, m-2, m-3", 5*time.Second,
		`!`+card+`.querySelector('.keys').hidden && ["m-1", "m-2", "m-3"].every(k => `+card+`.querySelector('.keys tbody').textContent.includes(k))`)
	if depth := tab.text(card + `.querySelector('.depth').textContent`); !strings.Contains(depth, " of 1000") {
		t.Errorf("depth shown = %q; want it out of the capacity, 1000", depth)
	}

	// No token: the server refuses, the page says so, and nothing pauses.
	tab.click(cardCSS + ` button.pause`)
	answer := card + `.querySelector('.answer').textContent`
	tab.waitFor("the page saying the pause was refused", 5*time.Second, answer+`.startsWith("pause refused (401)")`)
	if st := p.Status().State; st != shaper.StateRunning {
		t.Fatalf("state after a pause without the token = %s; want running", st)
	}
	t.Logf("without the token the page says: %s", tab.text(answer))

	// The token typed in: pause holds every departure.
	tab.typeInto("#token", token)
	tab.click(cardCSS + ` button.pause`)
	tab.waitFor("state paused on the page", 5*time.Second, card+`.dataset.state === "paused"`)
	testwait.For(t, 5*time.Second, "the requests in flight to finish", func() bool { return p.Status().InFlight == 0 })
	before := rec.DeliveredCount()
	time.Sleep(time.Second)
	if after := rec.DeliveredCount(); after != before {
		t.Errorf("the sink got %d deliveries in the second after the pause; want none", after-before)
	}
	tab.waitFor("a delivered rate of 0 while paused", 5*time.Second, `Number(`+deliveredRate+`) === 0`)
	if got := tab.text(`sessionStorage.getItem("shaper-admin-token") + "," + localStorage.length`); got != token+",0" {
		t.Errorf("sessionStorage token and localStorage length = %q; want the token, and nothing in localStorage", got)
	}

	tab.click(cardCSS + ` button.resume`)
	tab.waitFor("state running on the page", 5*time.Second, card+`.dataset.state === "running"`)
	testwait.For(t, 5*time.Second, "deliveries after the resume", func() bool { return rec.DeliveredCount() > before })
	tab.waitFor("a delivered rate above 0 after the resume", 5*time.Second, `Number(`+deliveredRate+`) > 0`)

	tab.noConsoleErrors(func(m consoleMessage) bool { // the refused pause, as the browser logs any 401
		return m.source == "network" && strings.HasSuffix(m.url, "/v1/pipelines/test/pause") && strings.Contains(m.text, "401")
	})
}

// browserTab is a page in a headless Chromium that a test started, with
// the errors its console reported.
type browserTab struct {
	t   *testing.T
	ctx context.Context

	mu     sync.Mutex
	errors []consoleMessage
}

// consoleMessage is an error of the page's console: a console.error call,
// an exception nothing caught, or an error of the browser's log (a CSP
// violation, a failed request).
type consoleMessage struct {
	source, url, text string
}

// openBrowser starts Debian's chromium, headless (--no-sandbox when run as
// root), and opens a blank tab. A missing chromium fails the test: make
// test-deps installs it. The browser is gone when the test ends.
func openBrowser(t *testing.T) *browserTab {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make test-deps installs it: apt-get install -y chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, stopBrowser := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, closeTab := chromedp.NewContext(allocCtx)
	tab := &browserTab{t: t, ctx: ctx}
	started := make(chan error, 1)
	go func() { started <- chromedp.Listen(ctx, tab.record) }() // starts the browser and opens the tab
	select {
	case err = <-started:
	case <-time.After(30 * time.Second):
		err = errors.New("no tab within 30s")
	}
	if err != nil {
		closeTab()
		stopBrowser()
		<-started
		t.Fatalf("start chromium: %v", err)
	}
	browser := chromedp.FromContext(ctx).Browser.Process()
	t.Cleanup(func() {
		closeTab()
		stopBrowser() // returns once the browser process has exited
		if err := browser.Signal(syscall.Signal(0)); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("chromium (pid %d) still runs after the test: %v", browser.Pid, err)
		}
	})
	return tab
}

// record keeps the errors among the tab's console events. It runs in the
// loop that reads the browser's messages, so it only appends.
func (b *browserTab) record(ev any) {
	var m consoleMessage
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError {
			return
		}
		var args []string
		for _, a := range ev.Args {
			args = append(args, string(a.Value)+a.Description)
		}
		m = consoleMessage{source: "console", text: strings.Join(args, " ")}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		m = consoleMessage{source: "exception", url: d.URL, text: d.Text}
		if d.Exception != nil {
			m.text += " " + d.Exception.Description
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level != log.EntryLevelError {
			return
		}
		m = consoleMessage{source: string(ev.Entry.Source), url: ev.Entry.URL, text: ev.Entry.Text}
	default:
		return
	}
	b.mu.Lock()
	b.errors = append(b.errors, m)
	b.mu.Unlock()
}

// noConsoleErrors fails the test for each console error that expected
// does not accept.
func (b *browserTab) noConsoleErrors(expected func(consoleMessage) bool) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.errors {
		if !expected(m) {
			b.t.Errorf("console error from %s: %s %s", m.source, m.text, m.url)
		}
	}
}

// navigate loads url in the tab and returns the response.
func (b *browserTab) navigate(url string) *network.Response {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		b.t.Fatalf("navigate to %s: %v", url, err)
	}
	return resp
}

// waitFor polls the JavaScript expression cond in the page until it is
// true, failing the test after timeout, naming what it waited for.
func (b *browserTab) waitFor(what string, timeout time.Duration, cond string) {
	b.t.Helper()
	timeout = max(timeout, 0)
	ctx, cancel := context.WithTimeout(b.ctx, timeout+10*time.Second) // the poll gives up first
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		b.t.Fatalf("waiting up to %v for %s (%s): %v", timeout, what, cond, err)
	}
}

// text returns the string that the JavaScript expression expr gives in the page.
func (b *browserTab) text(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

// click clicks, as a user would, the element that the CSS selector css
// finds.
func (b *browserTab) click(css string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(css), chromedp.NodeVisible)); err != nil {
		b.t.Fatalf("click %s: %v", css, err)
	}
}

// typeInto types text, key by key, into the field that the CSS selector
// css finds.
func (b *browserTab) typeInto(css, text string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(css), text, chromedp.NodeVisible)); err != nil {
		b.t.Fatalf("type into %s: %v", css, err)
	}
}
