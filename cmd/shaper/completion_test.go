package main

// The completion scripts, run by the shells themselves: bash's function
// with COMP_WORDS and COMP_CWORD set, zsh's through its completion system
// in a pseudo-terminal (zpty), as a user pressing TAB.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// completionScript returns what shaper completion shell prints, saved in a
// file of the test's temporary directory, as name.
func completionScript(t *testing.T, shell, name string) string {
	t.Helper()
	code, out, errs := runMain(t, "completion", shell)
	if code != exitOK || errs != "" {
		t.Fatalf("shaper completion %s = %d, %q", shell, code, errs)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// completionCase is a command line typed up to the cursor (the last word is
// the one being completed) and the completions wanted.
type completionCase struct {
	words []string
	want  []string
}

// completionCases are the cases both shells must complete alike: the
// commands, each command's flags as its FlagSet has them, the values of the
// flags that take one of a few, file names for --config (of dir, where the
// shell is to run), and the words of help and completion.
func completionCases(t *testing.T) (tests []completionCase, dir string) {
	t.Helper()
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	dir = t.TempDir()
	for _, f := range []string{"prod.yaml", "prod-eu.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests = []completionCase{
		{[]string{"shaper", ""}, names},
		{[]string{"shaper", "re"}, []string{"replay"}},
		{[]string{"shaper", "--"}, []string{"--help", "--log-format", "--log-level", "--version"}},
		{[]string{"shaper", "--log-level", ""}, logLevels},
		{[]string{"shaper", "--log-level", "debug", "ru"}, []string{"run"}},
		{[]string{"shaper", "run", "--log-format", ""}, logFormats},
		{[]string{"shaper", "validate", "--config", "pro"}, []string{"prod-eu.yaml", "prod.yaml"}}, // in dir
		{[]string{"shaper", "demo", "--so"}, []string{"--source"}},
		{[]string{"shaper", "healthcheck", "--t"}, []string{"--timeout"}},
		{[]string{"shaper", "run", "--w"}, []string{"--watch"}},
		{[]string{"shaper", "completion", ""}, []string{"bash", "zsh"}},
		{[]string{"shaper", "help", "h"}, []string{"healthcheck", "help"}},
	}
	for name, fs := range commandFlags(t) {
		var flags []string
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, "--"+f.Name) })
		tests = append(tests, completionCase{[]string{"shaper", name, "--"}, append(flags, "--help")})
	}
	return tests, dir
}

func TestBashCompletionCompletesCommandsFlagsAndValues(t *testing.T) {
	script := completionScript(t, "bash", "shaper.bash")
	tests, dir := completionCases(t)
	tests = append(tests,
		completionCase{[]string{"shaper", "replay", "--rate", ""}, nil}, // a free value: nothing to offer
		completionCase{[]string{"shaper", "launch", ""}, nil},
		completionCase{[]string{"shaper", "run", ""}, []string{"--config", "--dry-run", "--help", "--log-format", "--log-level", "--watch", "-h"}},
	)
	for _, tt := range tests {
		t.Run(strings.Join(tt.words, " "), func(t *testing.T) {
			const program = `source "$1" || exit 1; COMP_CWORD=$2; shift 2; COMP_WORDS=("$@"); _shaper; printf '%s\n' "${COMPREPLY[@]}"`
			args := append([]string{"--norc", "--noprofile", "-c", program, "bash", script, fmt.Sprint(len(tt.words) - 1)}, tt.words...)
			cmd := exec.Command("bash", args...)
			cmd.Dir = dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || stderr.Len() > 0 {
				t.Fatalf("bash: %v\n%s", err, stderr.String())
			}
			got := strings.Fields(string(out))
			if want := sorted(tt.want); !slices.Equal(sorted(got), want) {
				t.Errorf("bash completes %q to %q; want %q", strings.Join(tt.words, " "), sorted(got), want)
			}
		})
	}
}

// zshDriver types each case into an interactive zsh in a pseudo-terminal,
// where compinit has loaded _shaper from the directory $1, and presses TAB
// (bound to list-choices). Between markers it prints what zsh listed. It
// types only at the prompt: typed earlier, the terminal's line editing
// would take the ^U that clears the line.
const zshDriver = `
zmodload zsh/zpty || exit 1
zpty z zsh -f -i || exit 1
zpty -w z "PS1='ZP> ' PROMPT_EOL_MARK='' LISTMAX=1000; unset zle_bracketed_paste; setopt nobeep; fpath=($1 \$fpath); autoload -U compinit && compinit -u -D; bindkey '^I' list-choices"
zpty -w z "echo RE''ADY"
zpty -r z out '*READY*ZP> ' || exit 1
shift
n=0
for line in "$@"; do
  n=$((n + 1))
  zpty -n -w z "$line"$'\t'$'\C-u'"echo CA''SE-$n-END"$'\n'
  zpty -r z out "*CASE-$n-END*ZP> " || exit 1
  print -r -- "=== $n"
  print -r -- "$out"
done
zpty -d z
`

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]`)

func TestZshCompletionCompletesCommandsFlagsAndValues(t *testing.T) {
	script := completionScript(t, "zsh", "_shaper")
	if out, err := exec.Command("zsh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n does not parse the script: %v\n%s", err, out)
	}
	tests, dir := completionCases(t)
	args := []string{"-f", "-c", zshDriver, "zsh", filepath.Dir(script)}
	for _, tt := range tests {
		args = append(args, strings.Join(tt.words, " "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a generous bound on a hang
	defer cancel()
	cmd := exec.CommandContext(ctx, "zsh", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, out)
	}
	listings := regexp.MustCompile(`(?m)^=== \d+\n`).Split(ansiEscape.ReplaceAllString(string(out), ""), -1)
	if len(listings) != len(tests)+1 {
		t.Fatalf("zsh answered %d cases of %d:\n%s", len(listings)-1, len(tests), out)
	}
	for i, tt := range tests {
		var got []string
		for _, line := range strings.FieldsFunc(listings[i+1], func(r rune) bool { return r == '\r' || r == '\n' }) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "shaper") || strings.ContainsAny(line, "\b") || strings.Contains(line, "ZP>") || strings.Contains(line, "CASE-") {
				continue // the typed line, as typed (with a backspace) and redrawn; the prompt; the markers
			}
			names, _, _ := strings.Cut(line, " -- ") // the candidates, then their description
			got = append(got, strings.Fields(names)...)
		}
		if !slices.Equal(sorted(got), sorted(tt.want)) {
			t.Errorf("zsh completes %q to %q; want %q\n%s", strings.Join(tt.words, " "), sorted(got), sorted(tt.want), listings[i+1])
		}
	}
}

// sorted returns a sorted copy of s.
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
