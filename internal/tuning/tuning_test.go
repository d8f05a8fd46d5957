package tuning

import (
	"log/slog"
	"net"
	"os"
	"runtime"
	"testing"
)

func TestResolveLetsTheEnvironmentWinOverTheConfig(t *testing.T) {
	tests := []struct {
		env, config string
		unset       bool // SHAPER_TUNING not in the environment
		want        Knobs
		wantErr     bool
	}{
		{unset: true, config: "", want: All},
		{unset: true, config: "on", want: All},
		{unset: true, config: "off", want: 0},
		{unset: true, config: "fast", wantErr: true},
		{env: "off", config: "on", want: 0},
		{env: "on", config: "off", want: All},
		{env: "off:clock", config: "off", want: All &^ KnobClock},
		{env: "off:conn,procs", want: KnobClock | KnobHeap},
		{env: "off:clock,procs,heap,conn", want: 0},
		{env: "", wantErr: true},
		{env: "OFF", wantErr: true},
		{env: "off:sleep", wantErr: true},
	}
	for _, tt := range tests {
		if tt.unset {
			t.Setenv(EnvVar, "") // restored after the test
			os.Unsetenv(EnvVar)
		} else {
			t.Setenv(EnvVar, tt.env)
		}
		got, err := Resolve(tt.config)
		if (err != nil) != tt.wantErr || err == nil && got != tt.want {
			t.Errorf("%s=%q (set: %v), tuning: %q: Resolve = %v, %v; want %v (error: %v)", EnvVar, tt.env, !tt.unset, tt.config, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if again, err := parseEnv(got.String()); err != nil || again != got {
				t.Errorf("%v: String %q parses back as %v, %v", got, got.String(), again, err)
			}
		}
	}
}

// With tuning off, every knob takes the plain path: Go timers, a
// GOMAXPROCS and a GOGC the runtime keeps, the net.Conn as dialled. With
// it on, the tuned one (on Linux).
func TestTuningOffTakesThePlainPaths(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	off := Knobs(0)
	if a := off.NewAlarms(); a != nil {
		t.Errorf("tuning off: NewAlarms() = %v; want nil (Go timers)", a)
	}
	if c := dial(); off.Wrap(c) != c {
		t.Errorf("tuning off: Wrap(TCP) = %T; want the connection itself", off.Wrap(c))
	}
	if p := off.NewProcs(slog.New(slog.DiscardHandler)); !p.fixed {
		t.Error("tuning off: NewProcs would change GOMAXPROCS; want it left alone")
	}
	procs := runtime.GOMAXPROCS(0)
	off.NewProcs(slog.New(slog.DiscardHandler)).Set(1)
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("tuning off: Set(1/s) made GOMAXPROCS %d; want %d, untouched", got, procs)
	}
	for knob, what := range Knobs(0).Report() {
		t.Logf("off: %s: %s", knob, what)
	}

	if a := All.NewAlarms(); a == nil {
		t.Error("tuning on: NewAlarms() = nil; want precise alarms")
	}
	_, raw := All.Wrap(dial()).(*RawConn)
	if want := runtime.GOOS == "linux"; raw != want {
		t.Errorf("tuning on: Wrap(TCP) is a *RawConn: %v; want %v on %s", raw, want, runtime.GOOS)
	}
	if p := All.NewProcs(slog.New(slog.DiscardHandler)); p.fixed != (os.Getenv("GOMAXPROCS") != "") {
		t.Errorf("tuning on: NewProcs fixed = %v; want it to follow the rate unless GOMAXPROCS is set", p.fixed)
	}
}
