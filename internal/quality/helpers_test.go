package quality_test

import (
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// pgconnConfig returns host:port of a database URL.
func pgconnConfig(dbURL string) (string, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", dbURL, err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}
