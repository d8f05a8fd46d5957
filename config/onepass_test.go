package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One pass: a typo no longer hides the problems after it, and every problem
// of a file carries file:line:col as well as its key path.
func TestLoadReportsEveryProblemInOnePassWithItsPlaceInTheFile(t *testing.T) {
	src := `admin: {listen: "127.0.0.1:9090"}
pipelines:
  - name: psp
    source:
      nats: {url: "nats://127.0.0.1:4222", subject: callbacks.psp, stream: CALLBACKS}
    bucket:
      capacity: -1
      max_queue_time: soon
    rate:
      limt: 50
      mode: wavy
    sink:
      http:
        url: ftp://psp.example.com/notify
        retry: {max_attempts: -1}
`
	path := filepath.Join(t.TempDir(), "shaper.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load = nil; want problems")
	}
	for _, want := range []string{
		path + ":10:7: pipelines[0].rate.limt: unknown key",
		path + ":8:7: pipelines[0].bucket.max_queue_time: want a duration",
		path + ":7:7: pipelines[0].bucket.capacity: must be >= 1, got -1",
		path + ":11:7: pipelines[0].rate.mode: want leaky or token",
		path + ":9:5: pipelines[0].rate.limit: must be a number > 0, got 0", // missing: the place of its mapping
		path + ":14:9: pipelines[0].sink.http.url: want an absolute http:// or https:// URL",
		path + ":15:17: pipelines[0].sink.http.retry.max_attempts: must be >= 1, got -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems lack %q:\n%v", want, err)
		}
	}
	// A key that did not decode is reported once, not again by validation.
	if strings.Contains(err.Error(), "max_queue_time: must be > 0") {
		t.Errorf("max_queue_time reported twice, as undecodable and as zero:\n%v", err)
	}
	if n := len(strings.Split(err.Error(), "\n")); n != 7 {
		t.Errorf("%d problems; want 7:\n%v", n, err)
	}
}

func TestParentPath(t *testing.T) {
	tests := []struct{ give, want string }{
		{"pipelines[0].rate.limit", "pipelines[0].rate"},
		{"pipelines[0].rate", "pipelines[0]"},
		{"pipelines[0]", "pipelines"},
		{"pipelines", ""},
		{`pipelines[0].sink.http.headers["X.Y"]`, "pipelines[0].sink.http.headers"},
	}
	for _, tt := range tests {
		if got := parentPath(tt.give); got != tt.want {
			t.Errorf("parentPath(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}
