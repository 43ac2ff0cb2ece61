package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
)

func testEnv(vars map[string]string, stderr *bytes.Buffer) Env {
	return Env{Getenv: func(k string) string { return vars[k] }, Stderr: stderr}
}

func TestDevStatePath(t *testing.T) {
	cache := t.TempDir()
	e := testEnv(map[string]string{"XDG_CACHE_HOME": cache}, nil)
	require.Equal(t, filepath.Join(cache, "agentq", "dev.json"), devStatePath(e, ""))
	require.Equal(t, filepath.Join("/data", "dev.json"), devStatePath(e, "/data"))
	// A relative XDG_CACHE_HOME is invalid by the spec: the system's cache
	// directory is used instead.
	sys, err := os.UserCacheDir()
	if err == nil {
		e = testEnv(map[string]string{"XDG_CACHE_HOME": "relative"}, nil)
		require.Equal(t, filepath.Join(sys, "agentq", "dev.json"), devStatePath(e, ""))
	}
}

// The state goes to the data directory and the default path, is found
// while the process lives, and remove deletes only what still describes
// this instance.
func TestDevStateWriteFindRemove(t *testing.T) {
	cache, data := t.TempDir(), t.TempDir()
	e := testEnv(map[string]string{"XDG_CACHE_HOME": cache}, nil)
	st := devState{NATSURL: "nats://127.0.0.1:1234", DatabaseURL: "postgres://x", PID: os.Getpid(), StartedAt: time.Now().UTC(), DataDir: data}
	remove, err := writeDevState(e, data, st)
	require.NoError(t, err)
	for _, p := range []string{filepath.Join(data, "dev.json"), filepath.Join(cache, "agentq", "dev.json")} {
		got, err := readDevState(p)
		require.NoError(t, err, p)
		require.Equal(t, st.NATSURL, got.NATSURL)
		require.Equal(t, st.DatabaseURL, got.DatabaseURL)
		require.Equal(t, st.PID, got.PID)
		require.True(t, st.StartedAt.Equal(got.StartedAt))
	}

	got, path, ok := liveDevState(e, config.Config{})
	require.True(t, ok)
	require.Equal(t, filepath.Join(cache, "agentq", "dev.json"), path, "without AGENTQ_DATA_DIR: the default path")
	require.Equal(t, st.NATSURL, got.NATSURL)
	_, path, ok = liveDevState(e, config.Config{DataDir: data})
	require.True(t, ok)
	require.Equal(t, filepath.Join(data, "dev.json"), path, "with AGENTQ_DATA_DIR: that directory's first")

	// A second instance took the default path since: it keeps it.
	other := st
	other.StartedAt = st.StartedAt.Add(time.Second)
	removeOther, err := writeDevState(e, "", other)
	require.NoError(t, err)
	remove()
	require.NoFileExists(t, filepath.Join(data, "dev.json"))
	got, err = readDevState(filepath.Join(cache, "agentq", "dev.json"))
	require.NoError(t, err)
	require.True(t, other.StartedAt.Equal(got.StartedAt), "the other instance's file stays")
	removeOther()
	require.NoFileExists(t, filepath.Join(cache, "agentq", "dev.json"))
}

// The state of an agentq dev that was killed is ignored.
func TestDevStateOfDeadProcessIgnored(t *testing.T) {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	cache := t.TempDir()
	e := testEnv(map[string]string{"XDG_CACHE_HOME": cache}, nil)
	_, err := writeDevState(e, "", devState{NATSURL: "nats://dead", PID: cmd.Process.Pid, StartedAt: time.Now()})
	require.NoError(t, err)
	_, _, ok := liveDevState(e, config.Config{})
	require.False(t, ok)
}

func TestNATSAndDatabaseURLPrecedence(t *testing.T) {
	cache := t.TempDir()
	defaults, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)

	// Nothing running, nothing set: the default, and a clear error.
	var stderr bytes.Buffer
	e := testEnv(map[string]string{"XDG_CACHE_HOME": cache}, &stderr)
	require.Equal(t, "nats://127.0.0.1:4222", natsURL(e, defaults))
	_, err = databaseURL(e, defaults)
	require.EqualError(t, err, "AGENTQ_DATABASE_URL is not set and no agentq dev is running: start one with `make dev` (its database is found automatically) or set AGENTQ_DATABASE_URL")
	require.Empty(t, stderr.String())

	// A running agentq dev: used, with a note each.
	st := devState{NATSURL: "nats://127.0.0.1:4333", DatabaseURL: "postgres://dev", PID: os.Getpid(), StartedAt: time.Now()}
	remove, err := writeDevState(e, "", st)
	require.NoError(t, err)
	defer remove()
	require.Equal(t, st.NATSURL, natsURL(e, defaults))
	db, err := databaseURL(e, defaults)
	require.NoError(t, err)
	require.Equal(t, st.DatabaseURL, db)
	path := filepath.Join(cache, "agentq", "dev.json")
	require.Equal(t, "agentq: using the agentq dev instance at nats://127.0.0.1:4333 (pid "+itoa(st.PID)+", from "+path+"; set AGENTQ_NATS_URL to use another server)\n"+
		"agentq: using the agentq dev instance's database at postgres://dev (pid "+itoa(st.PID)+", from "+path+"; set AGENTQ_DATABASE_URL to use another database)\n", stderr.String())

	// Explicit settings win, silently.
	stderr.Reset()
	vars := map[string]string{"XDG_CACHE_HOME": cache, "AGENTQ_NATS_URL": "nats://elsewhere:4222", "AGENTQ_DATABASE_URL": "postgres://elsewhere"}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	require.NoError(t, err)
	e = testEnv(vars, &stderr)
	require.Equal(t, "nats://elsewhere:4222", natsURL(e, cfg))
	db, err = databaseURL(e, cfg)
	require.NoError(t, err)
	require.Equal(t, "postgres://elsewhere", db)
	require.Empty(t, stderr.String())
}

func itoa(n int) string { return strconv.Itoa(n) }

// A second agentq dev (another data directory) takes the default path while
// the first runs; when the second stops, the default path describes the
// first again: stopping one instance never deletes another's state.
func TestDevStateSecondInstanceStopKeepsFirst(t *testing.T) {
	cache, dataA, dataB := t.TempDir(), t.TempDir(), t.TempDir()
	e := testEnv(map[string]string{"XDG_CACHE_HOME": cache}, nil)
	a := devState{NATSURL: "nats://127.0.0.1:1111", DatabaseURL: "postgres://a", PID: os.Getpid(), StartedAt: time.Now().UTC(), DataDir: dataA}
	removeA, err := writeDevState(e, dataA, a)
	require.NoError(t, err)
	b := devState{NATSURL: "nats://127.0.0.1:2222", DatabaseURL: "postgres://b", PID: os.Getpid(), StartedAt: a.StartedAt.Add(time.Second), DataDir: dataB}
	removeB, err := writeDevState(e, dataB, b)
	require.NoError(t, err)
	def := filepath.Join(cache, "agentq", "dev.json")
	got, err := readDevState(def)
	require.NoError(t, err)
	require.Equal(t, b.NATSURL, got.NATSURL, "the newest instance is the default")

	removeB()
	require.NoFileExists(t, filepath.Join(dataB, "dev.json"))
	got, err = readDevState(def)
	require.NoError(t, err, "the first instance still runs: its state is back at the default path")
	require.Equal(t, a.NATSURL, got.NATSURL)
	require.Equal(t, a.DatabaseURL, got.DatabaseURL)
	require.True(t, a.StartedAt.Equal(got.StartedAt))
	got, err = readDevState(filepath.Join(dataA, "dev.json"))
	require.NoError(t, err)
	require.Equal(t, a.NATSURL, got.NATSURL)

	removeA()
	require.NoFileExists(t, def)
	require.NoFileExists(t, filepath.Join(dataA, "dev.json"))
}
