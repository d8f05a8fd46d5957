package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStallStopsAProcessAndAlwaysContinuesIt stalls a child and finds it
// stopped in a stall and running once resumed, whenever that comes.
func TestStallStopsAProcessAndAlwaysContinuesIt(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	state := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
	}
	resume := stall(cmd.Process.Pid, 150*time.Millisecond, 50*time.Millisecond)
	stopped := waitFor(t.Context(), 2*time.Second, func() bool { return state() == "T" })
	resume() // in a stall or between two: it runs on either way
	if !stopped {
		t.Error("never stopped")
	}
	if s := state(); s == "T" {
		t.Errorf("state %s after resume; want it running or sleeping", s)
	}
	resume() // a second call does nothing
}
