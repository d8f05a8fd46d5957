package main

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Machine describes where the figures were measured.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	MemoryMiB  int    `json:"memory_mib"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	// LoadStart and LoadEnd are the 1-minute load averages when the run
	// started and ended: a load near or above Cores means other work shared
	// the machine.
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
}

func describeMachine() Machine {
	m := Machine{
		CPU:        cmp.Or(procValue("/proc/cpuinfo", "model name"), runtime.GOARCH),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Go:         runtime.Version(),
		LoadStart:  loadAverage(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.MemoryMiB = int(procKiB("/proc/meminfo", "MemTotal") / 1024)
	return m
}

// procValue returns the value of key in a /proc file of "key: value"
// lines; "" if it has none.
func procValue(path, key string) string {
	b, _ := os.ReadFile(path) // a file that cannot be read has no key
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// procKiB returns the value of key in a /proc file that gives it in kB.
func procKiB(path, key string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(procValue(path, key), " kB"), 10, 64)
	return n
}

func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (the kernel fixes it for
// user space whatever its internal HZ).
const clockTick = 10 * time.Millisecond

// procCPU returns the CPU time (user + system) a process has used, from
// /proc/<pid>/stat. Its resolution is one clock tick, 10ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// count fields after the last ')'. utime and stime are fields 14, 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// processCPU returns the CPU time (user + system) a process has used, in
// nanoseconds, from its process CPU clock: clock_gettime of
// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), the clock that
// clock_getcpuclockid(3) names. It counts every thread of the process,
// those that have exited too, and Linux lets any process read it.
func processCPU(pid int) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err != nil {
		return 0, fmt.Errorf("CPU clock of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
}

// peakRSS is a process's peak resident set (VmHWM of
// /proc/<pid>/status), in MiB.
func peakRSS(p *proc) float64 {
	return float64(procKiB(fmt.Sprintf("/proc/%d/status", p.pid()), "VmHWM")) / 1024
}

// rusage returns the CPU time getrusage counts for who: this process
// (RUSAGE_SELF), or its children that have been waited for
// (RUSAGE_CHILDREN); microsecond resolution.
func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration { return rusage(syscall.RUSAGE_SELF) }

// machineBusy returns the CPU time every process on the machine has used
// (the non-idle fields of /proc/stat's cpu line but steal), and the time
// the virtual machine's host took from it (steal): both run other work
// than the harness's on the same cores.
func machineBusy() (busy, steal time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0
	}
	var ticks, stolen int64
	// user nice system idle iowait irq softirq steal ...: all but idle and
	// iowait; guest time is already counted in user.
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		switch {
		case i == 7:
			stolen = n
		case i == 3 || i == 4 || i > 7:
		default:
			ticks += n
		}
	}
	return time.Duration(ticks) * clockTick, time.Duration(stolen) * clockTick
}

// loadProbe measures how much of the machine other work used while a
// section ran: the machine's busy CPU time minus this process's and its
// children's (the children are waited for within the section; a child
// still running is counted by the caller through live).
type loadProbe struct {
	start                   time.Time
	busy, steal, self, kids time.Duration
	loadStart, loadEnd      float64
}

func startLoadProbe() *loadProbe {
	busy, steal := machineBusy()
	return &loadProbe{start: time.Now(), busy: busy, steal: steal, self: selfCPU(), kids: rusage(syscall.RUSAGE_CHILDREN), loadStart: loadAverage()}
}

// Load is what else ran on the machine during a section.
type Load struct {
	// ForeignPct is the CPU used by processes other than the harness and
	// its children, as a percentage of the whole machine (all cores).
	ForeignPct float64 `json:"foreign_cpu_pct"`
	// StealPct is the CPU the virtual machine's host took from it (steal),
	// as a percentage of the whole machine.
	StealPct  float64 `json:"steal_cpu_pct,omitempty"`
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
	Seconds   float64 `json:"seconds"`
}

func (p *loadProbe) stop() Load {
	elapsed := time.Since(p.start)
	busy, steal := machineBusy()
	ours := selfCPU() - p.self + rusage(syscall.RUSAGE_CHILDREN) - p.kids
	foreign := max(busy-p.busy-ours, 0)
	machine := elapsed.Seconds() * float64(runtime.NumCPU())
	return Load{
		ForeignPct: 100 * foreign.Seconds() / machine,
		StealPct:   100 * (steal - p.steal).Seconds() / machine,
		LoadStart:  p.loadStart,
		LoadEnd:    loadAverage(),
		Seconds:    elapsed.Seconds(),
	}
}
