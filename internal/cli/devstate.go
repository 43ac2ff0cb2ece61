package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/agentq/agentq/internal/config"
)

// devStateFile is the name of the file a running agentq dev leaves for the
// other commands, so that in another terminal `agentq publish`, `tail`,
// `dlq` or `replay` find its NATS server and database with nothing set.
const devStateFile = "dev.json"

// devState is what a running agentq dev tells the other commands.
type devState struct {
	NATSURL     string    `json:"nats_url"`
	DatabaseURL string    `json:"database_url"`
	PID         int       `json:"pid"`
	StartedAt   time.Time `json:"started_at"`
	// DataDir is the --data directory, "" for a temporary one.
	DataDir string `json:"data_dir,omitempty"`
}

// devStatePath is where agentq dev writes its state and the other commands
// look for it: $AGENTQ_DATA_DIR/dev.json when a data directory is given,
// else agentq/dev.json in the user's cache directory (XDG_CACHE_HOME is
// honoured on every system, so a test or a second setup can move it), else
// in the temporary directory.
func devStatePath(e Env, dataDir string) string {
	if dataDir != "" {
		return filepath.Join(dataDir, devStateFile)
	}
	dir := e.Getenv("XDG_CACHE_HOME")
	if !filepath.IsAbs(dir) {
		var err error
		if dir, err = os.UserCacheDir(); err != nil {
			return filepath.Join(os.TempDir(), "agentq-"+strconv.Itoa(os.Getuid()), devStateFile)
		}
	}
	return filepath.Join(dir, "agentq", devStateFile)
}

// writeDevState records st where the other commands look: in the data
// directory if there is one, and always at the default path, so that a
// client without AGENTQ_DATA_DIR finds an instance started with --data too.
// remove deletes the files that still describe this instance; where one
// replaced the state of another agentq dev that still runs (the default
// path, shared by instances on different data directories), it puts that
// state back instead, so stopping one instance never hides another.
func writeDevState(e Env, dataDir string, st devState) (remove func(), err error) {
	paths := []string{devStatePath(e, "")}
	if dataDir != "" {
		paths = append([]string{devStatePath(e, dataDir)}, paths...)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep the URLs' & readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(st); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	var written []string
	replaced := map[string][]byte{} // path: the live instance's state it held
	remove = func() {
		for _, p := range written {
			// Another agentq dev may have taken the default path since.
			cur, err := readDevState(p)
			if err != nil || !cur.same(st) {
				continue
			}
			if prev, ok := replaced[p]; ok {
				if old, err := parseDevState(prev); err == nil && old.running(e) && writeFileAtomic(p, prev) == nil {
					continue
				}
			}
			_ = os.Remove(p)
		}
	}
	for _, p := range paths {
		if prev, err := os.ReadFile(p); err == nil {
			if old, err := parseDevState(prev); err == nil && !old.same(st) && old.running(e) {
				replaced[p] = prev
			}
		}
		if err := writeFileAtomic(p, raw); err != nil {
			remove()
			return nil, fmt.Errorf("dev state file: %w", err)
		}
		written = append(written, p)
	}
	return remove, nil
}

// running reports whether the instance s describes still runs: its
// process lives and, if it has a data directory, the state file there
// still describes it (it removes that file when it stops).
func (s devState) running(e Env) bool {
	if s.PID <= 0 || !processAlive(s.PID) {
		return false
	}
	if s.DataDir == "" {
		return true
	}
	cur, err := readDevState(devStatePath(e, s.DataDir))
	return err == nil && cur.same(s)
}

// same reports whether s and o describe one instance.
func (s devState) same(o devState) bool { return s.PID == o.PID && s.StartedAt.Equal(o.StartedAt) }

// writeFileAtomic writes through a temporary file and a rename, so a
// reader never sees half a file. 0600: the database URL may hold a
// password.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".dev-*.json")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return err
	}
	return nil
}

func readDevState(path string) (devState, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return devState{}, err
	}
	st, err := parseDevState(raw)
	if err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

func parseDevState(raw []byte) (devState, error) {
	var st devState
	err := json.Unmarshal(raw, &st)
	return st, err
}

// liveDevState returns the state of a running agentq dev and the file it
// came from: the data directory's when AGENTQ_DATA_DIR is set, else the
// default one. A file whose process is gone (agentq dev was killed) is
// ignored.
func liveDevState(e Env, cfg config.Config) (devState, string, bool) {
	paths := []string{devStatePath(e, "")}
	if cfg.DataDir != "" {
		paths = append([]string{devStatePath(e, cfg.DataDir)}, paths...)
	}
	for _, p := range paths {
		st, err := readDevState(p)
		if err == nil && st.PID > 0 && processAlive(st.PID) {
			return st, p, true
		}
	}
	return devState{}, "", false
}

func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	if runtime.GOOS == "windows" {
		return true // FindProcess opened it: it exists
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// natsURL is the NATS server a command should use: AGENTQ_NATS_URL when it
// is set, else a running agentq dev's (with a note on stderr), else the
// default.
func natsURL(e Env, cfg config.Config) string {
	if e.Getenv("AGENTQ_NATS_URL") != "" {
		return cfg.NATSURL
	}
	if st, path, ok := liveDevState(e, cfg); ok && st.NATSURL != "" {
		fmt.Fprintf(e.Stderr, "agentq: using the agentq dev instance at %s (pid %d, from %s; set AGENTQ_NATS_URL to use another server)\n", st.NATSURL, st.PID, path)
		return st.NATSURL
	}
	return cfg.NATSURL
}

// databaseURL is the database a command should use: AGENTQ_DATABASE_URL
// when it is set, else a running agentq dev's (with a note on stderr), else
// an error that says how to get one.
func databaseURL(e Env, cfg config.Config) (string, error) {
	if e.Getenv("AGENTQ_DATABASE_URL") != "" {
		return cfg.DatabaseURL, nil
	}
	if st, path, ok := liveDevState(e, cfg); ok && st.DatabaseURL != "" {
		fmt.Fprintf(e.Stderr, "agentq: using the agentq dev instance's database at %s (pid %d, from %s; set AGENTQ_DATABASE_URL to use another database)\n", st.DatabaseURL, st.PID, path)
		return st.DatabaseURL, nil
	}
	return "", errors.New("AGENTQ_DATABASE_URL is not set and no agentq dev is running: start one with `make dev` (its database is found automatically) or set AGENTQ_DATABASE_URL")
}
