//go:build !unix

package testenv

import (
	"errors"
	"io"
)

// holdAddr is not done here: Up works as long as nothing took the port
// while the proxy was down.
func holdAddr(string) (io.Closer, error) {
	return nil, errors.ErrUnsupported
}
