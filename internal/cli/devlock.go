package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// devLockFile is the file in a --data directory that a running agentq dev
// holds locked. Two instances on one directory would share a NATS store
// and a dev database: both servers ack different events at the same
// sequence and one is lost after a restart.
const devLockFile = "dev.lock"

// dataDirBusyError says that another process holds the data directory.
type dataDirBusyError struct {
	dir string
	pid int // 0: unknown (the holder has not written it yet)
}

func (e *dataDirBusyError) Error() string {
	who := "pid unknown"
	if e.pid > 0 {
		who = "pid " + strconv.Itoa(e.pid)
	}
	return fmt.Sprintf("another agentq dev is running on this directory (%s): %s; stop it first, or give this one another --data directory", who, e.dir)
}

// lockDataDir takes the lock of dir for as long as this process lives or
// until release, and writes this process's pid into the lock file for the
// message a second instance prints. The kernel drops the lock when the
// process ends, however it ends, so a crash leaves nothing to clean. The
// file itself stays: removing it would let a newcomer lock a new file
// while an older holder still holds the unlinked one.
func lockDataDir(dir string) (release func(), err error) {
	f, err := os.OpenFile(dir+string(os.PathSeparator)+devLockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if !held {
		raw, _ := os.ReadFile(f.Name())
		f.Close()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		return nil, &dataDirBusyError{dir: dir, pid: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		unlock(f)
		f.Close()
	}, nil
}
