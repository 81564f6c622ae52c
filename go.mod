module github.com/kubewalk/kubewalk

go 1.26.3

require (
	github.com/google/gopacket v1.1.19
	github.com/stretchr/testify v1.12.1
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb
	golang.org/x/sys v0.43.0
	gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/exp v0.0.0-20250711185948-6ae5c78190dc // indirect
	golang.org/x/net v0.52.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
