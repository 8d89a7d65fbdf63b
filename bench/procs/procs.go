// Package procs is what the benchmark commands that start their own
// servers share: free loopback ports, waiting for a listener, the
// processes started and stopped together, a process's CPU time and
// resident memory read from /proc (so that a server's own cost is told
// from its load generator's on one machine), and medians. A command fails
// at the first error (Fatalf), stopping what it started, since os.Exit
// runs no deferred function.
package procs

import (
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Set is the processes a benchmark started, stopped together.
type Set struct {
	Dir  string // every process's working directory
	cmds []*exec.Cmd
}

// Start starts name with args in s.Dir, with env added to this process's
// environment.
func (s *Set) Start(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = s.Dir, append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		s.Fatalf("start %s: %v", name, err)
	}
	s.cmds = append(s.cmds, cmd)
	return cmd
}

// Fatalf stops the processes and exits with the message.
func (s *Set) Fatalf(format string, args ...any) {
	s.Stop()
	log.Fatalf(format, args...)
}

// FreePort is a loopback TCP port free at the moment.
func (s *Set) FreePort() int {
	p, err := FreePort()
	if err != nil {
		s.Fatalf("%v", err)
	}
	return p
}

// WaitListen waits until addr accepts TCP connections, at most within.
func (s *Set) WaitListen(addr string, within time.Duration) {
	if err := WaitListen(addr, within); err != nil {
		s.Fatalf("%v", err)
	}
}

// CPU is pid's user and system time so far.
func (s *Set) CPU(pid int) time.Duration {
	d, err := CPU(pid)
	if err != nil {
		s.Fatalf("%v", err)
	}
	return d
}

// Stop kills the processes started through s, and only those, and waits
// for them.
func (s *Set) Stop() {
	for _, c := range s.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	s.cmds = nil
}

// FreePort is a loopback TCP port free at the moment.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// WaitListen waits until addr accepts TCP connections, at most within.
func WaitListen(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %v", addr, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CPU is a process's user and system time so far, from /proc/PID/stat.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses: utime
	// and stime are the 14th and 15th of the whole line.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, b)
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ut+st) * tick, nil
}

// Status is a size field of /proc/PID/status (VmRSS, VmHWM: the resident
// memory now and at its peak), in bytes.
func Status(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s: %w", pid, field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// Median is v's median (the upper one of an even count); v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// Result is one run: calls per second, and the server's CPU per call.
type Result struct {
	PerSec   float64
	CPUPerOp time.Duration
}

// Measure runs callers goroutines for d, each calling call (with its
// number and its count of calls so far) once it has the last answer, and
// reads pid's CPU time before and after. The first error fails the
// benchmark.
func (s *Set) Measure(pid, callers int, d time.Duration, call func(caller, i int) error) Result {
	var total atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, callers)
	c0, t0 := s.CPU(pid), time.Now()
	for c := range callers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := call(c, i); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		})
	}
	var err error
	select {
	case <-time.After(d):
	case err = <-errs:
	}
	close(stop)
	wg.Wait()
	if err != nil {
		s.Fatalf("%v", err)
	}
	el, used := time.Since(t0), s.CPU(pid)-c0
	n := total.Load()
	return Result{PerSec: float64(n) / el.Seconds(), CPUPerOp: used / time.Duration(max(n, 1))}
}

// Medians are the medians of rs's throughputs and CPU per call.
func Medians(rs []Result) (perSec float64, cpuPerOp time.Duration) {
	a, b := make([]float64, len(rs)), make([]float64, len(rs))
	for i, r := range rs {
		a[i], b[i] = r.PerSec, float64(r.CPUPerOp)
	}
	return Median(a), time.Duration(Median(b))
}
