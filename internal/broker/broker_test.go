package broker

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func publishOnce(t *testing.T, url, subject string) (*jetstream.PubAck, error) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return js.Publish(ctx, subject, []byte("x"))
}

// What Setup creates exists before the first network client can connect:
// a publish straight after Start succeeds on its first try, and the store
// is the same one (the stream keeps its message across a restart).
func TestSetupRunsBeforeTheListener(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	opts := Options{Port: -1, StoreDir: dir, Setup: func(ctx context.Context, js jetstream.JetStream) error {
		calls++
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EARLY", Subjects: []string{"early.>"}})
		return err
	}}
	srv, err := Start(opts)
	require.NoError(t, err)
	ack, err := publishOnce(t, srv.ClientURL(), "early.one")
	require.NoError(t, err, "the stream exists as soon as the port is open")
	require.Equal(t, "EARLY", ack.Stream)
	require.Equal(t, uint64(1), ack.Sequence)
	srv.Shutdown()

	srv, err = Start(opts)
	require.NoError(t, err)
	defer srv.Shutdown()
	ack, err = publishOnce(t, srv.ClientURL(), "early.two")
	require.NoError(t, err)
	require.Equal(t, uint64(2), ack.Sequence, "the listening server uses the store Setup wrote to")
	require.Equal(t, 2, calls)
}

// Without Setup a stream nobody created is missing: the publish gets no
// responders. This is what Setup prevents.
func TestWithoutSetupNoStream(t *testing.T) {
	srv, err := Start(Options{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Shutdown()
	_, err = publishOnce(t, srv.ClientURL(), "early.one")
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
}

func TestSetupErrorStopsStart(t *testing.T) {
	port := freePort(t)
	boom := errors.New("boom")
	_, err := Start(Options{Port: port, StoreDir: t.TempDir(), Setup: func(context.Context, jetstream.JetStream) error { return boom }})
	require.ErrorIs(t, err, boom)
	_, err = net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	require.Error(t, err, "nothing listens after a failed start")
}

// A taken port fails at once with the address, instead of after the
// server's 10 s readiness wait.
func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	began := time.Now()
	_, err = Start(Options{Port: port, StoreDir: t.TempDir()})
	require.Error(t, err)
	require.Contains(t, err.Error(), "cannot listen on 127.0.0.1:"+strconv.Itoa(port))
	require.Less(t, time.Since(began), 5*time.Second)
}

func TestDefaultMaxPayload(t *testing.T) {
	srv, err := Start(Options{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	require.Equal(t, int64(DefaultMaxPayload), nc.MaxPayload())
	require.Equal(t, int64(8<<20), nc.MaxPayload())
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
