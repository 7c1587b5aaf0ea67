package service

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/tokenlimit/tokenlimit"
	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/plane"
)

// This file holds what a transport that authenticates its callers (the LLM
// proxy) needs: resolving an api key as a credential, and a budget of its
// own, such as failed authentications per client address, decided on the
// same store as the configuration's limits.

// ErrUnknownAPIKey marks an api key that is neither listed under api_keys
// nor a plane key's secret, and a request without one. Test with errors.Is.
var ErrUnknownAPIKey = errors.New("unknown api key")

// Authenticate resolves the api key of req (its api_key descriptor) as a
// credential. A key listed under api_keys leaves req as it is. A plane
// key's secret (see planeLevels) gives req as made with that key: api_key
// becomes the key's value (plane.KeyValue, never the secret), team and plan
// the key's, and the key's and its team's limits go with it, so that
// deciding req looks nothing up again; the key is returned too. A plane
// secret that is unknown, revoked, past its rotation grace, disabled or
// expired is an error matching ErrUnauthorized and the plane's reason
// (plane.ErrUnknownKey, ErrKeyDisabled, ErrKeyExpired); any other key, or
// none, is ErrUnknownAPIKey.
//
// Keys are compared by their SHA-256 digests, so that the time taken does
// not depend on how much of a known key the given one matches.
func (s *Service) Authenticate(req Request) (Request, *plane.Key, error) {
	rules := s.rules.Load()
	apiKey := req.Descriptors[plane.KeyDescriptor]
	sum := sha256.Sum256([]byte(apiKey))
	switch {
	case apiKey != "" && rules.lists(&sum):
		return req, nil, nil
	case s.opts.Plane == nil || !plane.IsSecret(apiKey):
		return req, nil, ErrUnknownAPIKey
	}
	desc, lv, key, err := s.resolvePlaneKey(rules.cfg, req.Descriptors, &sum)
	if err != nil {
		return req, nil, err
	}
	req.Descriptors, req.key = desc, &lv
	return req, key, nil
}

// resolvePlaneKey returns the descriptors desc stand for when made with the
// plane key whose secret is their api_key, of digest sum (see
// keyDescriptors), the key's levels and the key; or an error matching
// ErrUnauthorized.
func (s *Service) resolvePlaneKey(cfg *config.Config, desc map[string]string, sum *[sha256.Size]byte) (map[string]string, levels, *plane.Key, error) {
	key, team, err := s.opts.Plane.AuthenticateDigest(sum, s.opts.Clock())
	if err != nil {
		return nil, levels{}, nil, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return keyDescriptors(cfg, desc, key, team), levelsOf(key, team), key, nil
}

// keyDigests returns the SHA-256 of each key listed under api_keys.
func keyDigests(cfg *config.Config) map[[sha256.Size]byte]struct{} {
	out := make(map[[sha256.Size]byte]struct{}, len(cfg.APIKeys))
	for k := range cfg.APIKeys {
		out[sha256.Sum256([]byte(k))] = struct{}{}
	}
	return out
}

// listsKey reports whether the configuration lists apiKey under api_keys,
// found by its digest: the time it takes tells nothing of how much of a
// listed key apiKey matches.
func (r *ruleset) listsKey(apiKey string) bool {
	sum := sha256.Sum256([]byte(apiKey))
	return r.lists(&sum)
}

// lists is listsKey for a key's digest sum.
func (r *ruleset) lists(sum *[sha256.Size]byte) bool {
	_, ok := r.keyDigests[*sum]
	return ok
}

// CheckLimit decides l alone for a request with descriptors desc, as Check
// decides the configuration's limits: on the same store, with its timeout
// and breaker and l's failure mode, and counted in the same metrics. l is
// the caller's own, not the configuration's, such as the proxy's budget of
// failed authentications: its name should be one no configuration can give
// (one with a ':'), so that its budgets are its own. l.Limit applies as it
// is (no calendar window, max_keys or api key override). A denial of l
// with local_cache is remembered (see LocalDenial) until its retry-after,
// whatever settlements refund meanwhile: no reservation charges l. A
// request lacking a descriptor of l's key is admitted, charging nothing.
func (s *Service) CheckLimit(ctx context.Context, l *config.Limit, desc map[string]string) (Decision, error) {
	ctx, span := s.startDecision(ctx, OpCheck)
	d, err := s.checkLimit(ctx, l, desc)
	endDecision(span, &d, err)
	return d, err
}

func (s *Service) checkLimit(ctx context.Context, l *config.Limit, desc map[string]string) (Decision, error) {
	start := time.Now()
	c, ok, err := s.ownCheck(l, desc)
	if err != nil || !ok {
		return Decision{Allowed: true, At: s.opts.Clock()}, err
	}
	d, err := s.decide(ctx, plan{enforced: []check{c}})
	if err != nil {
		return Decision{}, err
	}
	s.metrics.observe(d, time.Since(start))
	return d, nil
}

// LocalDenial returns the denial of l (with local_cache) for desc that
// this replica remembers from the store's last answer to CheckLimit, while
// its retry-after lasts, without a store call; false if there is none.
func (s *Service) LocalDenial(l *config.Limit, desc map[string]string) (Decision, bool) {
	c, ok, err := s.ownCheck(l, desc)
	if err != nil || !ok {
		return Decision{}, false
	}
	return s.cachedDenial(plan{enforced: []check{c}})
}

// ownCheck returns the check of the caller's own limit l for desc; false
// when desc lacks a descriptor of l's key.
func (s *Service) ownCheck(l *config.Limit, desc map[string]string) (check, bool, error) {
	if _, err := s.validate(0, Request{Descriptors: desc}); err != nil {
		return check{}, false, err
	}
	key, ok := applies(l, nil, desc, tags{hashTag: s.rules.Load().cfg.HashTag})
	if !ok {
		return check{}, false, nil
	}
	cost, err := l.Cost.Of(desc, 1, 0, nil)
	if err != nil {
		s.metrics.costFailed(l.Name, err)
	}
	return check{limit: l, own: true, desc: desc, item: tokenlimit.Item{Key: key, Limit: l.Limit, Cost: cost}}, true, nil
}
