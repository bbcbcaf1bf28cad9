package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
)

// defaultImage is the image the testcontainers kafka module is written for (KRaft, single node).
const defaultImage = "confluentinc/confluent-local:7.5.0"

var (
	sharedMu        sync.Mutex
	sharedContainer *tckafka.KafkaContainer // guarded by sharedMu
)

// errNoDocker says no Docker engine could even be addressed; the harness falls through without waiting.
var errNoDocker = errors.New("no Docker engine (DOCKER_HOST unset and no docker socket)")

// dockerAddressable reports whether a Docker engine might answer: DOCKER_HOST, a testcontainers
// properties file, or one of the usual socket paths. It only looks at the environment and the file
// system, so a machine without Docker costs nothing (testcontainers itself panics without a host).
func dockerAddressable(getenv func(string) string, exists func(string) bool) bool {
	if getenv("DOCKER_HOST") != "" || getenv("TESTCONTAINERS_HOST_OVERRIDE") != "" {
		return true
	}
	home := getenv("HOME")
	candidates := []string{"/var/run/docker.sock", "/run/docker.sock"}
	if home != "" {
		candidates = append(candidates,
			filepath.Join(home, ".testcontainers.properties"),
			filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	if xdg := getenv("XDG_RUNTIME_DIR"); xdg != "" {
		candidates = append(candidates, filepath.Join(xdg, "docker.sock"))
	}
	for _, p := range candidates {
		if exists(p) {
			return true
		}
	}
	return false
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startShared starts the binary's one Kafka container and returns its seeds.
func startShared(getenv func(string) string) (seeds []string, err error) {
	if !dockerAddressable(getenv, fileExists) {
		return nil, errNoDocker
	}
	defer func() {
		// testcontainers panics on some host-discovery failures; a missing engine is not a test failure.
		if r := recover(); r != nil {
			seeds, err = nil, fmt.Errorf("docker provider: %v", r)
		}
	}()
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return nil, fmt.Errorf("docker provider: %w", err)
	}
	hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = provider.Health(hctx) // Health closes the provider
	cancel()
	if err != nil {
		return nil, fmt.Errorf("docker engine not healthy: %w", err)
	}

	image := getenv(EnvImage)
	if image == "" {
		image = defaultImage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := tckafka.Run(ctx, image, tckafka.WithClusterID("aep-gateway-it"))
	if c != nil {
		sharedMu.Lock()
		sharedContainer = c
		sharedMu.Unlock()
	}
	if err != nil {
		stopShared()
		return nil, fmt.Errorf("start %s: %w", image, err)
	}
	seeds, err = c.Brokers(ctx)
	if err != nil || len(seeds) == 0 {
		stopShared()
		return nil, fmt.Errorf("container brokers: %v", err)
	}
	return seeds, nil
}

// stopShared removes the shared container; safe to call when none was started, and more than once.
func stopShared() {
	sharedMu.Lock()
	c := sharedContainer
	sharedContainer = nil
	sharedMu.Unlock()
	if c == nil {
		return
	}
	if err := testcontainers.TerminateContainer(c); err != nil {
		fmt.Fprintf(os.Stderr, "integration: terminate kafka container: %v\n", err)
	}
}
