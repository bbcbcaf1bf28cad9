package main

import (
	"context"
	"crypto/tls"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kzerolog"
)

// kafkaOpts are the connection options of every client the gateway opens:
// seeds, TLS, SASL and logging.
func kafkaOpts(c config, seeds []string, log zerolog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("aep-gateway"),
		kgo.WithLogger(kafkaLogger(log)),
		kgo.RetryTimeout(15 * time.Second),
	}
	if c.KafkaTLS || c.KafkaTLSCA != "" || c.KafkaTLSCert != "" {
		dial, err := kafkaTLSDialer(c, tlsConfig(c))
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.Dialer(dial))
	}
	mech := strings.ToUpper(c.KafkaSASLMechanism)
	if mech == "" {
		return opts, nil
	}
	pw, err := saslPassword(c)
	if err != nil {
		return nil, err
	}
	switch mech {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := pw()
			return plain.Auth{User: c.KafkaSASLUser, Pass: p}, err
		})))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Sha256(scramAuth(c.KafkaSASLUser, pw))))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Sha512(scramAuth(c.KafkaSASLUser, pw))))
	}
	return opts, nil
}

// kafkaLogger routes franz-go's logs into zerolog (plugin/kzerolog, which
// writes errors as their text) at warn and above whatever --log-level says:
// the client's info and debug levels are per-connection chatter.
func kafkaLogger(log zerolog.Logger) kgo.Logger {
	l := log.With().Str("component", "kafka-client").Logger()
	if l.GetLevel() < zerolog.WarnLevel {
		l = l.Level(zerolog.WarnLevel)
	}
	return errorKey{kzerolog.New(&l)}
}

// errorKey renames franz-go's "err" key to "error", the key of every other
// line of the gateway (zerolog's Err), so one query finds both.
type errorKey struct{ kgo.Logger }

func (l errorKey) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	for i := 0; i+1 < len(keyvals); i += 2 {
		if keyvals[i] == "err" {
			keyvals[i] = zerolog.ErrorFieldName
		}
	}
	l.Logger.Log(level, msg, keyvals...)
}

// tlsConfig is the base of every Kafka TLS connection: TLS 1.2 or later,
// the --kafka-tls-server-name override. kafkaTLSDialer adds the CA and the
// client certificate at each connection.
func tlsConfig(c config) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.KafkaTLSServerName}
}
