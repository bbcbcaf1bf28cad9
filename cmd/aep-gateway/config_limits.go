package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/aep-gateway/aep-gateway/gateway"
)

// countSet counts the non-empty values.
func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

// validateLimits checks the connection, body and authentication-reload
// bounds (docs/security.md).
func (c config) validateLimits() error {
	if c.MaxConnections < 0 || c.MaxConnectionsPerIP < 0 {
		return errors.New("--max-connections and --max-connections-per-ip must not be negative")
	}
	if c.MaxConnections > 0 && c.MaxConnectionsPerIP > c.MaxConnections {
		return fmt.Errorf("--max-connections-per-ip %d is over --max-connections %d", c.MaxConnectionsPerIP, c.MaxConnections)
	}
	if c.IdleTimeout <= 0 {
		return fmt.Errorf("--idle-timeout %s: want a positive duration", c.IdleTimeout)
	}
	if c.ReadTimeout < 0 || c.MaxInflightBytesPerTenant < 0 {
		return errors.New("--read-timeout and --max-inflight-bytes-per-tenant must not be negative")
	}
	if c.MaxInflightBytesPerTenant > 0 && c.MaxInflightBytesPerTenant < c.MaxBodyBytes {
		return fmt.Errorf("--max-inflight-bytes-per-tenant %d is below --max-body-bytes %d: the largest request could never be taken", c.MaxInflightBytesPerTenant, c.MaxBodyBytes)
	}
	if _, err := gateway.ParseCORSOrigins(c.CORSAllowedOrigins); err != nil {
		return fmt.Errorf("--cors-allowed-origins: %w", err)
	}
	if c.JWTJWKSURL != "" {
		u, err := url.Parse(c.JWTJWKSURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("--jwt-jwks-url %q: want an http(s) URL", c.JWTJWKSURL)
		}
	}
	if c.JWTJWKSRefresh < time.Second || c.AuthReloadInterval < 0 {
		return errors.New("--jwt-jwks-refresh must be at least 1s and --auth-reload-interval not negative")
	}
	return nil
}

// corsOrigins is the parsed --cors-allowed-origins (validated already).
func (c config) corsOrigins() []string {
	o, _ := gateway.ParseCORSOrigins(c.CORSAllowedOrigins)
	return o
}
