package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childReady is the line a child writes to its standard output once it is
// ready (ChildReady); StartChild waits for it.
const childReady = "agentq-test-child-ready"

// Child is the test binary re-executed as a separate process running one
// test of its own, so that a test can kill it for real: SIGKILL leaves the
// kernel to close its sockets, so its database transactions are cut
// mid-flight and nothing it held is settled or released gracefully.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when the process has exited
	out   *tail
	name  string
}

// StartChild runs the test binary again with only the top-level test run
// (its name, e.g. "TestScorerConformance") and env added to this process's
// environment, and returns once the child has called ChildReady. The child
// is killed at cleanup if it is still running; its last lines of output
// are logged if the test failed.
func StartChild(t testing.TB, run string, env ...string) *Child {
	t.Helper()
	args := []string{"-test.run=^" + run + "$", "-test.count=1", "-test.timeout=0"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	c := &Child{cmd: cmd, done: make(chan struct{}), out: &tail{max: 200}, name: run}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("child %s: %v", run, err)
	}
	c.stdin = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("child %s: %v", run, err)
	}
	cmd.Stderr = c.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", run, err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == childReady {
				once.Do(func() { close(ready) })
				continue
			}
			c.out.line(sc.Text())
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("last output of child %s (pid %d):\n%s", run, cmd.Process.Pid, c.out.String())
		}
	})
	select {
	case <-ready:
	case <-c.done:
		t.Fatalf("child %s exited before it was ready: %s\n%s", run, cmd.ProcessState, c.out.String())
	case <-time.After(2 * time.Minute):
		c.Kill()
		t.Fatalf("child %s not ready after 2m:\n%s", run, c.out.String())
	}
	return c
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to be gone.
func (c *Child) Kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Stop sends SIGTERM and waits until the child has stopped gracefully; a
// child still running after a minute is killed.
func (c *Child) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		c.Kill()
	}
}

// ChildReady tells the parent (StartChild) that this child is ready and
// returns a channel closed when the parent asks it to stop: SIGTERM, or its
// standard input reaching end of file because the parent has gone.
func ChildReady() <-chan struct{} {
	stop := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(stop) }) }
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; end() }()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); end() }()
	fmt.Println(childReady)
	return stop
}

// tail keeps the last max lines written to it.
type tail struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := strings.IndexByte(string(w.partial), '\n')
		if i < 0 {
			break
		}
		w.add(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *tail) line(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(s)
}

func (w *tail) add(s string) {
	w.lines = append(w.lines, s)
	if len(w.lines) > w.max {
		w.lines = w.lines[len(w.lines)-w.max:]
	}
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n") + string(w.partial)
}
