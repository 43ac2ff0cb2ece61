//go:build unix

package testenv

import (
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// holdAddr binds a TCP socket to addr without listening on it: connections
// to addr are refused, and the kernel gives the port to no one else — not
// to a listener on port 0, nor as a connection's source port. SO_REUSEADDR,
// as net.Listen sets it, lets it bind beside the connections of the
// listener just closed (in TIME_WAIT) and lets net.Listen bind again once
// it is closed.
func holdAddr(addr string) (io.Closer, error) {
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", addr, err)
	}
	family, sa := syscall.AF_INET6, syscall.Sockaddr(nil)
	if ip4 := a.IP.To4(); ip4 != nil {
		s := &syscall.SockaddrInet4{Port: a.Port}
		copy(s.Addr[:], ip4)
		family, sa = syscall.AF_INET, s
	} else {
		s := &syscall.SockaddrInet6{Port: a.Port}
		copy(s.Addr[:], a.IP.To16())
		sa = s
	}
	// As package net does: no child process started meanwhile inherits it.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("hold %s: socket: %w", addr, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold %s: SO_REUSEADDR: %w", addr, err)
	}
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold %s: bind: %w", addr, err)
	}
	return os.NewFile(uintptr(fd), "held "+addr), nil
}
