package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// exitOK is shaper's exit status on success.
const exitOK = 0

// runShaper runs the shaper binary with args and returns its exit status
// and output. A minute bounds a hang.
func runShaper(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, shaperBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("shaper %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}
