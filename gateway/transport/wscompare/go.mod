module github.com/aep-gateway/aep-gateway/gateway/transport/wscompare

go 1.26.0

require (
	github.com/aep-gateway/aep-gateway v0.0.0
	github.com/gobwas/ws v1.5.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/aep-gateway/aep-gateway => ../../..
