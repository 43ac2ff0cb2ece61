package testenv_test

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/testenv"
)

// While a proxy is down, connections to it are refused and its port is
// not handed out: a connection dialled from that port (as the kernel may
// pick it for a client's source port, and a client dialling the proxy
// from it would connect to itself) cannot take it, and Up gets it back.
func TestProxyKeepsItsAddressWhileDown(t *testing.T) {
	target, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = target.Close() })
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }() // echo
		}
	}()
	p := testenv.StartProxy(t, target.Addr().String())
	echo := func() error {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		require.Equal(t, "ping", string(buf))
		return nil
	}
	require.NoError(t, echo())

	for range 2 {
		p.Down()
		require.Error(t, echo(), "refused while down")
		self, err := net.ResolveTCPAddr("tcp", p.Addr())
		require.NoError(t, err)
		d := net.Dialer{LocalAddr: self}
		if c, err := d.Dial("tcp", p.Addr()); err == nil {
			_ = c.Close()
			t.Fatal("a connection from the proxy's port to itself took the port while the proxy was down")
		}
		p.Up(t)
		require.NoError(t, echo(), "forwarding again")
	}
}
