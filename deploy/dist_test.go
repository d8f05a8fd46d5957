package deploy_test

// Tests of make dist, which builds the release binaries.

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// make dist (its recipe, as make -n prints it: the cross builds take
// minutes) builds the release binary for linux and darwin on amd64 and
// arm64, as make build does but without cgo, stamped, and sums them.
func TestMakeDistCrossBuildsFourStampedReleaseBinariesAndSumsThem(t *testing.T) {
	const commit = "feedfacefeedfacefeedfacefeedfacefeedface"
	out, err := exec.Command("make", "-C", repoRoot, "--no-print-directory", "-n", "dist", "VERSION=v9.8.7-test", "COMMIT="+commit).Output()
	if err != nil {
		t.Fatalf("make -n dist: %v\n%s", err, out)
	}
	recipe := strings.ReplaceAll(string(out), "\\\n", " ")
	var built []string
	for _, line := range strings.Split(recipe, "\n") {
		if !strings.Contains(line, " build ") {
			continue
		}
		m := regexp.MustCompile(`GOOS=(\S+) GOARCH=(\S+) .* -o dist/shaper-(\S+) \./cmd/shaper$`).FindStringSubmatch(line)
		if m == nil || m[3] != m[1]+"-"+m[2] {
			t.Errorf("make dist builds %q; want GOOS=os GOARCH=arch ... -o dist/shaper-os-arch ./cmd/shaper", line)
			continue
		}
		built = append(built, m[3])
		for _, want := range []string{"CGO_ENABLED=0 ", " -tags nodemo ", " -trimpath ", "-X main.version=v9.8.7-test", "-X main.commit=" + commit, " -s -w"} {
			if !strings.Contains(line, want) {
				t.Errorf("make dist builds %s without %q: %s", m[3], want, line)
			}
		}
	}
	want := []string{"darwin-amd64", "darwin-arm64", "linux-amd64", "linux-arm64"}
	if !slices.Equal(slices.Sorted(slices.Values(built)), want) {
		t.Errorf("make dist builds %q; want %q", built, want)
	}
	sums := regexp.MustCompile(`(?m)^cd dist && sha256sum (.*) > SHA256SUMS$`).FindStringSubmatch(recipe)
	if sums == nil || !slices.Equal(slices.Sorted(slices.Values(strings.Fields(sums[1]))), []string{"shaper-darwin-amd64", "shaper-darwin-arm64", "shaper-linux-amd64", "shaper-linux-arm64"}) {
		t.Errorf("make dist does not sum the four binaries into dist/SHA256SUMS:\n%s", recipe)
	}
}
