package cli

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/examples"
	"github.com/tokenlimit/tokenlimit/proxy/costexpr"
	"github.com/tokenlimit/tokenlimit/service"
)

// configOptions are how every configuration is read: cost expressions are
// compiled with CEL.
var configOptions = config.Options{Compile: costexpr.Compile}

// configFile is a configuration file and the digest of the content last
// read from it, so a change is noticed exactly once (modification times can
// be too coarse to tell two quick edits apart).
type configFile struct {
	path string // "" for the built-in quickstart
	last [sha256.Size]byte
	// stores are the named stores of the first configuration read, whose
	// connections are opened at start: a reload may not change them.
	stores  map[string]config.Store
	started bool
}

// load reads the file once, remembers its digest and parses what it read.
func (c *configFile) load() (*config.Config, error) {
	if c.path == "" {
		return config.ParseWith(examples.Quickstart, "examples/quickstart.yaml (built in)", configOptions)
	}
	data, err := os.ReadFile(c.path)
	if err != nil {
		return nil, envoyHint(c.path, fmt.Errorf("config: %w", err))
	}
	c.last = sha256.Sum256(data)
	cfg, err := config.ParseWith(data, c.path, configOptions)
	if err != nil {
		return nil, envoyHint(c.path, countErrors(c.path, err))
	}
	if !c.started {
		c.stores, c.started = cfg.Stores, true
	} else if !maps.Equal(cfg.Stores, c.stores) {
		return nil, fmt.Errorf("%s: stores: changed since the start, and a store's connection is opened at start: restart to apply it", c.path)
	}
	return cfg, nil
}

// changed reports whether the file's content differs from what load read
// last. An unreadable file counts as unchanged: load would fail on it.
func (c *configFile) changed() bool {
	data, err := os.ReadFile(c.path)
	return err == nil && sha256.Sum256(data) != c.last
}

// watch reloads the configuration into svc on SIGHUP and, every interval
// (0: never), when the file's content changed. A bad file is rejected and the
// running limits stay. It returns when ctx ends.
func (c *configFile) watch(ctx context.Context, every time.Duration, svc *service.Service) {
	if c.path == "" {
		return
	}
	watchReloads(ctx, every, c.changed, func() {
		if cfg, err := c.load(); err != nil {
			svc.ReloadFailed(c.path, err)
		} else {
			_ = svc.Reload(cfg) // a refusal is logged and counted there
		}
	})
}

// watchReloads calls reload on SIGHUP and, every interval (0: never), when
// changed reports a change, until ctx ends. Calls are sequential.
func watchReloads(ctx context.Context, every time.Duration, changed func() bool, reload func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick:
			if !changed() {
				continue
			}
		}
		reload()
	}
}
