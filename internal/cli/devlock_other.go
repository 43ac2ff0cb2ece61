//go:build !unix

package cli

import "os"

// tryLock does not lock on systems without flock: agentq dev is developed
// and tested on Unix; there, two instances on one --data directory are not
// prevented.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}
