// Package browser checks the admin status page (shaper's statuspage
// directory, served by shaper.Admin) in headless Chromium, the way an
// operator uses it: over a real pipeline with traffic, pausing and resuming
// it with and without the admin token, with no error in the page's console.
//
// The package holds tests only. They sit apart from package shaper so that
// go test ./shaper needs no browser; make test runs them, after make
// test-deps has installed chromium, and a missing chromium fails them:
//
//	go test -race -count=1 ./shaper/browser/
package browser
