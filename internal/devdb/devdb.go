package devdb

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// launcherScript is pglite-server.mjs, run with node --eval so that the Go
// binary needs only node_modules on disk, not this source tree.
//
//go:embed pglite-server.mjs
var launcherScript string

// EnvDir names the environment variable that agentq's configuration (and
// testenv) read into Options.Dir: the directory holding node_modules.
const EnvDir = "AGENTQ_PGLITE_DIR"

// MaxConnections is how many client connections the server accepts at once.
// pglite-socket defaults to one and answers any further connection with
// "Too many connections", which pgxpool reports as a failed connect; every
// pool against a Server must stay below this.
const MaxConnections = 100

const (
	// DefaultStartTimeout bounds Start when Options.StartTimeout is zero. A
	// cold in-memory start takes a few seconds, but well over 30 on a
	// machine busy with a parallel test suite.
	DefaultStartTimeout = 60 * time.Second
	// closeGrace is how long Close waits after SIGTERM for a clean shutdown
	// (the database is checkpointed) before SIGKILL.
	closeGrace = 5 * time.Second
	// maxLogLine bounds one forwarded line of child output.
	maxLogLine = 4096
	// stderrTail is how many trailing lines of child stderr a startup error
	// quotes.
	stderrTail = 20
	// socketPackage is what must be installed under Dir.
	socketPackage = "node_modules/@electric-sql/pglite-socket/package.json"
)

// ErrNotInstalled is returned by Start (wrapped, with instructions) when no
// node_modules holding @electric-sql/pglite-socket can be found.
var ErrNotInstalled = errors.New("devdb: PGlite is not installed")

// Options configure Start. The zero value starts an in-memory database,
// finding node_modules from the working directory or the executable.
type Options struct {
	// DataDir is where the database lives across restarts; it is created if
	// missing. Empty: in memory, gone at Close.
	DataDir string
	// Dir is the directory containing node_modules (normally the repository
	// root; AGENTQ_PGLITE_DIR in agentq's configuration). Empty: the first
	// directory holding
	// node_modules/@electric-sql/pglite-socket found walking up from the
	// working directory, then from the executable's directory.
	Dir string
	// StartTimeout bounds how long Start waits for the server to accept
	// connections. Default DefaultStartTimeout (60s).
	StartTimeout time.Duration
	// Log receives the child's output at debug level and lifecycle lines.
	// The zero value discards.
	Log zerolog.Logger
}

// Server is a running PGlite child process. Close it when done; a Server
// whose parent dies is killed by the kernel (Linux) or exits when its stdin
// reaches EOF.
type Server struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	port  int
	log   zerolog.Logger

	done    chan struct{} // closed once the child has been reaped
	waitErr error         // set before done is closed

	closeOnce sync.Once
	closeErr  error
}

// Start launches the PGlite server and returns once it accepts connections
// on 127.0.0.1. ctx bounds only the start: cancelling it later does not stop
// the server, Close does. On error no child process is left running.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	dir, err := findDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("devdb: node not found in PATH (install Node.js 20 or later): %w", err)
	}
	dataDir := ""
	if opts.DataDir != "" {
		if dataDir, err = filepath.Abs(opts.DataDir); err != nil {
			return nil, fmt.Errorf("devdb: data dir: %w", err)
		}
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("devdb: data dir: %w", err)
		}
	}

	cmd := exec.Command(node, "--input-type=module", "--eval", launcherScript)
	cmd.Dir = dir // bare imports in an --eval module resolve from here
	cmd.Env = append(os.Environ(),
		"AGENTQ_PGLITE_DATA_DIR="+dataDir,
		"AGENTQ_PGLITE_PORT=0",
		"AGENTQ_PGLITE_MAX_CONNS="+strconv.Itoa(MaxConnections),
		"AGENTQ_PGLITE_TEMPLATE="+templatePath(dir),
	)
	cmd.SysProcAttr = sysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("devdb: %w", err)
	}
	// Our own pipes rather than cmd.StdoutPipe/StderrPipe: Wait (which runs
	// as soon as the child exits) closes those, cutting off the child's last
	// words, which a startup error must quote.
	stdout, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("devdb: %w", err)
	}
	stderr, stderrW, err := os.Pipe()
	if err != nil {
		stdout.Close()
		stdoutW.Close()
		return nil, fmt.Errorf("devdb: %w", err)
	}
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW

	s := &Server{
		cmd:   cmd,
		stdin: stdin,
		log:   opts.Log.With().Str("component", "devdb").Logger(),
		done:  make(chan struct{}),
	}
	began := time.Now()
	err = s.startLocked()
	// The child has its own copies of the write ends; once ours are closed
	// the readers see EOF when the child exits.
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdout.Close()
		stderr.Close()
		return nil, fmt.Errorf("devdb: starting node: %w", err)
	}

	tail := &lineRing{max: stderrTail}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		defer stderr.Close()
		forward(stderr, s.log, "stderr", tail, nil)
	}()
	ready := make(chan string, 1)
	stdoutDone := make(chan struct{})
	go func() {
		defer close(stdoutDone)
		defer stdout.Close()
		forward(stdout, s.log, "stdout", nil, ready)
	}()
	// childOutput is the tail of the child's stderr once it has been read to
	// the end (the child is gone), or as far as it got within a second.
	childOutput := func() string {
		select {
		case <-stderrDone:
		case <-time.After(time.Second):
		}
		return "child stderr: " + tail.String()
	}

	timer := time.NewTimer(opts.StartTimeout)
	defer timer.Stop()
	var line string
	select {
	case line = <-ready:
	case <-s.done:
		// It may have said why on stdout ("ERROR ...") before exiting.
		select {
		case <-stdoutDone:
		case <-time.After(time.Second):
		}
		select {
		case line = <-ready:
		default:
			return nil, fmt.Errorf("devdb: pglite server exited during start (%v); %s", s.waitErr, childOutput())
		}
	case <-ctx.Done():
		s.kill()
		return nil, fmt.Errorf("devdb: waiting for pglite server: %w; %s", ctx.Err(), childOutput())
	case <-timer.C:
		s.kill()
		return nil, fmt.Errorf("devdb: pglite server not ready after %s (raise AGENTQ_DEVDB_START_TIMEOUT on a busy machine); %s", opts.StartTimeout, childOutput())
	}
	if msg, ok := strings.CutPrefix(line, "ERROR "); ok {
		s.kill()
		return nil, fmt.Errorf("devdb: pglite server failed to start: %s; %s", msg, childOutput())
	}
	port, err := strconv.Atoi(strings.TrimPrefix(line, "READY port="))
	if !strings.HasPrefix(line, "READY port=") || err != nil || port <= 0 {
		s.kill()
		return nil, fmt.Errorf("devdb: unexpected first line from pglite server: %q; %s", line, childOutput())
	}
	s.port = port
	s.log.Info().Int("port", port).Str("data_dir", dataDir).Int("pid", cmd.Process.Pid).
		Dur("startup", time.Since(began)).Msg("pglite server ready")
	return s, nil
}

// startLocked starts the child from a goroutine locked to its OS thread and
// keeps that thread until the child is reaped: Pdeathsig fires when the
// starting thread exits, and the Go runtime may retire an unlocked thread at
// any time, which would kill a healthy child.
func (s *Server) startLocked() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	return <-started
}

// URL returns a connection string for pgx. It selects
// default_query_exec_mode=exec, which PGlite needs because all connections
// share one backend (see the package documentation).
func (s *Server) URL() string {
	return s.PsqlURL() + "&default_query_exec_mode=exec"
}

// PsqlURL returns the connection string for libpq clients such as psql,
// which refuse pgx's default_query_exec_mode: what a person is shown.
func (s *Server) PsqlURL() string {
	return fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port returns the TCP port the server listens on, on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Close stops the server: it closes the child's stdin and sends SIGTERM,
// which close the database cleanly, waits up to 5 seconds and then kills the
// child. It returns once the process is gone. It is safe to call more than
// once and from several goroutines; later calls return the first result.
// Connections still open are cut.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		_ = s.stdin.Close()
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(closeGrace):
			s.log.Warn().Dur("grace", closeGrace).Msg("pglite server ignored SIGTERM, killing it")
			_ = s.cmd.Process.Kill()
			<-s.done
			s.closeErr = errors.New("devdb: pglite server did not stop in time and was killed")
			return
		}
		var exit *exec.ExitError
		if s.waitErr != nil && errors.As(s.waitErr, &exit) {
			s.closeErr = fmt.Errorf("devdb: pglite server exited badly: %w", s.waitErr)
		}
		s.log.Debug().Int("port", s.port).Msg("pglite server stopped")
	})
	return s.closeErr
}

// kill ends a child that never became ready and reaps it.
func (s *Server) kill() {
	s.closeOnce.Do(func() {
		_ = s.stdin.Close()
		_ = s.cmd.Process.Kill()
		<-s.done
		s.closeErr = errors.New("devdb: server never started")
	})
}

// findDir returns the directory holding node_modules with pglite-socket.
func findDir(dir string) (string, error) {
	found, searched, err := FindPackage(dir, socketPackage)
	switch {
	case err != nil:
		return "", fmt.Errorf("devdb: %w", err)
	case found != "":
		return found, nil
	case dir != "":
		return "", fmt.Errorf("%w: %s not found; run \"npm ci\" in the agentq repository root (or \"make deps\")", ErrNotInstalled, filepath.Join(searched[0], socketPackage))
	}
	return "", fmt.Errorf("%w: no node_modules/@electric-sql/pglite-socket above %s; run \"npm ci\" in the agentq repository root (or \"make deps\"), or set %s to the directory holding node_modules",
		ErrNotInstalled, strings.Join(searched, " or "), EnvDir)
}

// FindPackage returns the directory holding pkg, a path under it such as
// "node_modules/x/package.json": dir itself when dir is given, else the
// first directory holding it walking up from the working directory, then
// from the executable's. found is "" when it is not there; searched says
// where it looked (dir, or the starting points), for error messages. The
// Node parts of agentq (this dev database, embed.Sentence) share it.
func FindPackage(dir, pkg string) (found string, searched []string, err error) {
	has := func(d string) bool {
		_, err := os.Stat(filepath.Join(d, pkg))
		return err == nil
	}
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", nil, err
		}
		if has(abs) {
			return abs, []string{abs}, nil
		}
		return "", []string{abs}, nil
	}
	if wd, err := os.Getwd(); err == nil {
		searched = append(searched, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			searched = append(searched, filepath.Dir(exe))
		}
	}
	for _, start := range searched {
		for d := start; ; d = filepath.Dir(d) {
			if has(d) {
				return d, searched, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", searched, nil
}

// templatePath names the cached pristine cluster for in-memory starts, keyed
// by the installed PGlite version so an upgrade never loads an old one. It
// lives in node_modules/.cache so "npm ci" clears it. Empty disables the
// cache.
func templatePath(dir string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "node_modules/@electric-sql/pglite/package.json"))
	if err != nil {
		return ""
	}
	var pkg struct{ Version string }
	if json.Unmarshal(raw, &pkg) != nil || pkg.Version == "" {
		return ""
	}
	cache := filepath.Join(dir, "node_modules", ".cache", "agentq-devdb")
	if os.MkdirAll(cache, 0o755) != nil {
		return ""
	}
	return filepath.Join(cache, "template-"+pkg.Version+".tar")
}

// forward logs each line of r at debug level, truncated to maxLogLine. The
// first line of stdout is the launcher's handshake and goes to ready
// instead. tail, if set, keeps the last lines for error messages.
func forward(r io.Reader, log zerolog.Logger, stream string, tail *lineRing, ready chan<- string) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := readLine(br)
		if line != "" || err == nil {
			if ready != nil {
				ready <- line
				ready = nil
			} else {
				log.Debug().Str("stream", stream).Msg(line)
				if tail != nil {
					tail.add(line)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line, keeping at most maxLogLine bytes of it.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(b) < maxLogLine {
			b = append(b, chunk[:min(len(chunk), maxLogLine-len(b))]...)
		}
		if err != nil || !isPrefix {
			return string(b), err
		}
	}
}

// lineRing keeps the last max lines written to it; safe for concurrent use.
type lineRing struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (r *lineRing) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
	if len(r.lines) > r.max {
		r.lines = r.lines[len(r.lines)-r.max:]
	}
}

func (r *lineRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return "(no output)"
	}
	return strings.Join(r.lines, " | ")
}
