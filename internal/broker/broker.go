// Package broker runs an embedded NATS server with JetStream in-process, for
// agentq dev and for tests. Production uses a real NATS cluster instead.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DefaultMaxPayload is the largest message the embedded server accepts
// unless Options.MaxPayload says otherwise: 8 MiB, above agentq's own
// payload limit (AGENTQ_MAX_PAYLOAD) so oversized events reach the consumers
// and are dead-lettered with a reason instead of refused by the server.
// docker-compose.yml gives production's NATS the same limit.
const DefaultMaxPayload = 8 << 20

// setupTimeout bounds Options.Setup.
const setupTimeout = 30 * time.Second

// Options configures the embedded server.
type Options struct {
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port for clients; -1 picks a free port. Default 4222.
	Port int
	// StoreDir holds JetStream's file store. Required.
	StoreDir string
	// MaxPayload is the largest message the server accepts. Default
	// DefaultMaxPayload.
	MaxPayload int32
	// Setup, if set, runs against the server before it accepts any network
	// client, through an in-process connection, within 30 seconds. Create
	// streams here: a client that connects the moment the port opens and
	// publishes at once must find them, not get "no responders".
	Setup func(ctx context.Context, js jetstream.JetStream) error
	// Log receives the server's notices and errors.
	Log zerolog.Logger
}

// Server is a running embedded NATS server.
type Server struct {
	ns *server.Server
}

// Start starts the server and waits until it accepts clients. With Setup,
// it first starts the server on StoreDir without a listener, runs Setup,
// shuts that server down and then starts the listening one on the same
// store, so what Setup created is there before the port opens.
func Start(o Options) (*Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("broker: StoreDir is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = 4222
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	if o.Port > 0 {
		// The server only logs a listen failure and then never becomes
		// ready; find out now and say so plainly.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("broker: cannot listen on %s: %w", addr, err)
		}
		_ = ln.Close()
	}
	if o.Setup != nil {
		if err := setup(o); err != nil {
			return nil, err
		}
	}
	ns, err := start(o, false)
	if err != nil {
		return nil, err
	}
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("broker: not ready for connections on %s within 10s", addr)
	}
	return &Server{ns: ns}, nil
}

// setup runs o.Setup on a server that listens on no port.
func setup(o Options) error {
	ns, err := start(o, true)
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("broker: in-process server not ready within 10s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("agentq-broker-setup"))
	if err != nil {
		return fmt.Errorf("broker: in-process connection: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := o.Setup(ctx, js); err != nil {
		return fmt.Errorf("broker: setup: %w", err)
	}
	return nil
}

func start(o Options, inProcessOnly bool) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		ServerName: "agentq-dev",
		Host:       o.Host,
		Port:       o.Port,
		DontListen: inProcessOnly,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: o.MaxPayload,
		NoSigs:     true, // signals belong to our main, not the library
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	ns.SetLoggerV2(logAdapter{o.Log}, false, false, false)
	ns.Start()
	return ns, nil
}

// ClientURL is the URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

type logAdapter struct{ log zerolog.Logger }

func (l logAdapter) Noticef(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l logAdapter) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l logAdapter) Fatalf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l logAdapter) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l logAdapter) Debugf(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
func (l logAdapter) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
