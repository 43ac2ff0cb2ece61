package embed

// The node child process that runs the sentence encoder: starting it,
// the JSON-line protocol of sentence-server.mjs, calls and their turns,
// and its death.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentq/agentq/internal/bus"
	"github.com/rs/zerolog"
)

// sentenceRequest and sentenceResponse are the JSON lines exchanged with
// sentence-server.mjs (see its header).
type sentenceRequest struct {
	ID        uint64   `json:"id"`
	Op        string   `json:"op"`
	Texts     []string `json:"texts"`
	Reference bool     `json:"reference,omitempty"`
}

type sentenceResponse struct {
	ID        *uint64  `json:"id"`
	Vectors   []string `json:"vectors"`
	Tokens    [][]int  `json:"tokens"`
	Reference [][]int  `json:"reference"`
	Error     string   `json:"error"`
}

// sentenceChild is one node process and the calls waiting on it.
type sentenceChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   zerolog.Logger
	tail  *tailLines

	writeMu sync.Mutex // one request line at a time on stdin

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan sentenceResponse
	progress time.Time // when the child last answered anything

	gone    chan struct{} // closed when stdout ends: no more answers
	goneErr error         // why, set before gone is closed
	done    chan struct{} // closed once the process is reaped
	waitErr error         // set before done is closed
}

// startSentenceChild starts node on the script and waits for its ready
// line.
func startSentenceChild(ctx context.Context, node, dir string, timeout time.Duration, log zerolog.Logger) (*sentenceChild, error) {
	began := time.Now()
	cmd := exec.Command(node, "--input-type=module", "--eval", sentenceScript)
	cmd.Dir = dir // bare imports in an --eval module resolve from here
	cmd.SysProcAttr = sentenceProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SentenceModel, err)
	}
	// Our own pipes rather than cmd.StdoutPipe/StderrPipe: Wait (which
	// runs as soon as the child exits) closes those, cutting off the last
	// lines, which an error must quote.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", SentenceModel, err)
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		stdout.Close()
		stdoutW.Close()
		return nil, fmt.Errorf("%s: %w", SentenceModel, err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	c := &sentenceChild{
		cmd:     cmd,
		stdin:   stdin,
		log:     log,
		tail:    &tailLines{max: sentenceStderrTail},
		pending: map[uint64]chan sentenceResponse{},
		gone:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	err = c.startLocked()
	stdoutW.Close() // the child has its own copies
	stderrW.Close()
	if err != nil {
		stdout.Close()
		stderr.Close()
		return nil, bus.Unavailable(fmt.Errorf("%s: starting node: %w", SentenceModel, err))
	}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		defer stderr.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 4096), 1<<20)
		for sc.Scan() {
			c.log.Debug().Str("stream", "stderr").Msg(sc.Text())
			c.tail.add(sc.Text())
		}
	}()
	ready := make(chan sentenceReady, 1)
	go c.read(stdout, ready, stderrDone)

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var r sentenceReady
	select {
	case r = <-ready:
	case <-c.gone:
		return nil, bus.Unavailable(fmt.Errorf("%s: the sentence encoder exited during start: %w", SentenceModel, c.goneErr))
	case <-ctx.Done():
		c.kill()
		return nil, fmt.Errorf("%s: waiting for the sentence encoder to start: %w", SentenceModel, ctx.Err())
	case <-timer.C:
		c.kill()
		return nil, bus.Unavailable(fmt.Errorf("%s: the sentence encoder did not start within %s; stderr: %s", SentenceModel, timeout, c.tail))
	}
	if r.Error != "" || !r.Ready {
		c.kill()
		return nil, bus.Unavailable(fmt.Errorf("%s: the sentence encoder failed to start: %s; stderr: %s", SentenceModel, r.Error, c.tail))
	}
	c.log.Info().Int("pid", cmd.Process.Pid).Str("backend", r.Backend).
		Int("load_ms", r.LoadMS).Int("warmup_ms", r.WarmMS).Dur("startup", time.Since(began)).
		Msg("sentence encoder ready")
	return c, nil
}

type sentenceReady struct {
	Ready   bool   `json:"ready"`
	Backend string `json:"backend"`
	LoadMS  int    `json:"load_ms"`
	WarmMS  int    `json:"warm_ms"`
	Error   string `json:"error"`
}

// startLocked starts the child from a goroutine locked to its OS thread
// and keeps that thread until the child is reaped: Pdeathsig fires when
// the starting thread exits, and the Go runtime may retire an unlocked
// thread at any time, which would kill a healthy child (as in devdb).
func (c *sentenceChild) startLocked() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = c.cmd.Wait()
		close(c.done)
	}()
	return <-started
}

// read delivers the ready line, then each answer to its caller, until
// stdout ends; then it fails every pending call.
func (c *sentenceChild) read(stdout *os.File, ready chan<- sentenceReady, stderrDone <-chan struct{}) {
	defer stdout.Close()
	br := bufio.NewReaderSize(stdout, 64<<10)
	first := true
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if len(line) > 0 && err == nil {
			if first {
				first = false
				var r sentenceReady
				if jerr := json.Unmarshal(line, &r); jerr != nil {
					r.Error = fmt.Sprintf("unexpected first line %.200q", line)
				}
				ready <- r
				continue
			}
			var res sentenceResponse
			if jerr := json.Unmarshal(line, &res); jerr != nil || res.ID == nil {
				c.log.Warn().Str("line", fmt.Sprintf("%.200s", line)).Msg("sentence encoder wrote a line that is no answer")
				continue
			}
			c.mu.Lock()
			c.progress = time.Now()
			ch := c.pending[*res.ID]
			delete(c.pending, *res.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- res // buffered
			}
		}
		if err != nil {
			break
		}
	}
	// Let the process be reaped and its stderr drained, briefly, so the
	// error says how it ended.
	select {
	case <-c.done:
	case <-time.After(time.Second):
	}
	select {
	case <-stderrDone:
	case <-time.After(time.Second):
	}
	status := "still running"
	select {
	case <-c.done:
		status = fmt.Sprint(c.waitErr)
		if c.waitErr == nil {
			status = "exit status 0"
		}
	default:
	}
	c.goneErr = fmt.Errorf("stdout closed (%v), process %s; stderr: %s", err, status, c.tail)
	close(c.gone)
}

// call sends req and waits for its answer. It fails with bus.Unavailable
// when the child is gone, or has answered nothing for hang; with ctx's
// error when ctx ends first.
func (c *sentenceChild) call(ctx context.Context, req sentenceRequest, hang time.Duration) (sentenceResponse, error) {
	ch := make(chan sentenceResponse, 1)
	c.mu.Lock()
	c.nextID++
	req.ID = c.nextID
	c.pending[req.ID] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
	}
	line, err := json.Marshal(req)
	if err != nil {
		forget()
		return sentenceResponse{}, fmt.Errorf("%s: %w", SentenceModel, err)
	}
	// Written from a goroutine: a child that stopped reading would block
	// the write once the pipe is full, and the caller must still see ctx
	// and the hang timeout. Lines never interleave (writeMu); an abandoned
	// write completes when the child reads or dies (then killed).
	written := make(chan error, 1)
	go func() {
		c.writeMu.Lock()
		defer c.writeMu.Unlock()
		_, err := c.stdin.Write(append(line, '\n'))
		written <- err
	}()
	sent := time.Now()
	timer := time.NewTimer(hang)
	defer timer.Stop()
	for {
		select {
		case err := <-written:
			written = nil
			if err != nil {
				forget()
				select { // a write to a dead child fails before stdout ends
				case <-c.gone:
					return sentenceResponse{}, bus.Unavailable(fmt.Errorf("%s: the sentence encoder exited: %w", SentenceModel, c.goneErr))
				case <-time.After(time.Second):
				}
				return sentenceResponse{}, bus.Unavailable(fmt.Errorf("%s: writing to the sentence encoder: %w", SentenceModel, err))
			}
		case res := <-ch:
			if res.Error != "" {
				return res, fmt.Errorf("%s: the sentence encoder refused the request: %s", SentenceModel, res.Error)
			}
			return res, nil
		case <-c.gone:
			forget()
			select { // answered, then died: the answer stands
			case res := <-ch:
				if res.Error == "" {
					return res, nil
				}
			default:
			}
			return sentenceResponse{}, bus.Unavailable(fmt.Errorf("%s: the sentence encoder exited: %w", SentenceModel, c.goneErr))
		case <-ctx.Done():
			forget()
			return sentenceResponse{}, ctx.Err()
		case <-timer.C:
			// Hung only if nothing at all came back for hang: the request
			// may be queued behind others that are progressing.
			c.mu.Lock()
			last := c.progress
			c.mu.Unlock()
			if last.Before(sent) {
				last = sent
			}
			if idle := time.Since(last); idle < hang {
				timer.Reset(hang - idle)
				continue
			}
			forget()
			return sentenceResponse{}, bus.Unavailable(fmt.Errorf("%s: the sentence encoder answered nothing for %s; killed", SentenceModel, hang))
		}
	}
}

func (c *sentenceChild) exited() bool {
	select {
	case <-c.gone:
		return true
	default:
		return false
	}
}

func (c *sentenceChild) deathErr() error {
	if c.exited() {
		return c.goneErr
	}
	return nil
}

// close ends the child cleanly: EOF on stdin, then SIGKILL after a grace.
func (c *sentenceChild) close() error {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(sentenceCloseGrace):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s: the sentence encoder did not exit within %s and was killed", SentenceModel, sentenceCloseGrace)
	}
	var exit *exec.ExitError
	if c.waitErr != nil && errors.As(c.waitErr, &exit) {
		return fmt.Errorf("%s: the sentence encoder exited badly: %w", SentenceModel, c.waitErr)
	}
	return nil
}

// kill ends the child now and reaps it.
func (c *sentenceChild) kill() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	<-c.done
}

// turns lets one request at a time go to the child: priority requests
// first, each kind in arrival order. The zero value is ready.
type turns struct {
	mu        sync.Mutex
	busy      bool
	high, low []chan struct{} // waiting; closed to hand over the turn
}

// acquire waits for the turn, or for ctx to end.
func (t *turns) acquire(ctx context.Context, priority bool) error {
	t.mu.Lock()
	if !t.busy {
		t.busy = true
		t.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	if priority {
		t.high = append(t.high, ch)
	} else {
		t.low = append(t.low, ch)
	}
	t.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		t.mu.Lock()
		n := len(t.high) + len(t.low)
		t.high = slices.DeleteFunc(t.high, func(c chan struct{}) bool { return c == ch })
		t.low = slices.DeleteFunc(t.low, func(c chan struct{}) bool { return c == ch })
		handed := n == len(t.high)+len(t.low) // not found: the turn was ours
		t.mu.Unlock()
		if handed {
			t.release()
		}
		return ctx.Err()
	}
}

// release hands the turn to the next waiter, if any.
func (t *turns) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var next chan struct{}
	switch {
	case len(t.high) > 0:
		next, t.high = t.high[0], t.high[1:]
	case len(t.low) > 0:
		next, t.low = t.low[0], t.low[1:]
	default:
		t.busy = false
		return
	}
	close(next)
}

// tailLines keeps the last max lines written to it; safe for concurrent
// use.
type tailLines struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tailLines) add(line string) {
	if len(line) > 500 {
		line = line[:500]
		for !utf8.ValidString(line) {
			line = line[:len(line)-1]
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tailLines) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "(none)"
	}
	return strings.Join(t.lines, " | ")
}
