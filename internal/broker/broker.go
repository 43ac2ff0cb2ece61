// Package broker runs an embedded NATS server with JetStream in-process, for
// agentq dev and for tests. Production uses a real NATS cluster instead.
package broker

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// Options configures the embedded server.
type Options struct {
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port for clients; -1 picks a free port. Default 4222.
	Port int
	// StoreDir holds JetStream's file store. Required.
	StoreDir string
	// MaxPayload is the largest message the server accepts. Default 8 MiB,
	// above agentq's own payload limit so oversized events reach the
	// consumers and are dead-lettered with a reason instead of refused.
	MaxPayload int32
	// Log receives the server's notices and errors.
	Log zerolog.Logger
}

// Server is a running embedded NATS server.
type Server struct {
	ns *server.Server
}

// Start starts the server and waits until it accepts clients.
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
		o.MaxPayload = 8 << 20
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "agentq-dev",
		Host:       o.Host,
		Port:       o.Port,
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
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("broker: not ready for connections on %s:%d within 10s", o.Host, o.Port)
	}
	return &Server{ns: ns}, nil
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
