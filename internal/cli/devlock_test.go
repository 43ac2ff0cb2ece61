package cli

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHelperHoldDataDirLock is not a test: run as a child process by
// TestDataDirLockReleasedOnCrash, it takes the lock and waits to be killed.
func TestHelperHoldDataDirLock(t *testing.T) {
	dir := os.Getenv("AGENTQ_TEST_HOLD_LOCK")
	if dir == "" {
		t.Skip("a helper process")
	}
	if _, err := lockDataDir(dir); err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Hour)
}

// The data directory's lock is held by one process at a time, names its
// holder, and is released when the holder is killed: a crash never leaves
// a directory that needs cleaning by hand.
func TestDataDirLockReleasedOnCrash(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no lock on this system")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldDataDirLock$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTQ_TEST_HOLD_LOCK="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked", strings.TrimSpace(line))

	_, err = lockDataDir(dir)
	var busy *dataDirBusyError
	require.True(t, errors.As(err, &busy), "%v", err)
	require.Equal(t, cmd.Process.Pid, busy.pid)
	require.Contains(t, err.Error(), "another agentq dev is running on this directory (pid "+itoa(cmd.Process.Pid)+")")

	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no clean-up of its own
	_ = cmd.Wait()
	release, err := lockDataDir(dir)
	require.NoError(t, err, "the kernel released the dead holder's lock")
	require.FileExists(t, filepath.Join(dir, devLockFile))

	// Within one process too: a second lock on the directory is refused
	// until the first is released.
	_, err = lockDataDir(dir)
	require.ErrorAs(t, err, &busy)
	require.Equal(t, os.Getpid(), busy.pid)
	release()
	release2, err := lockDataDir(dir)
	require.NoError(t, err)
	release2()
}
