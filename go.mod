module sglmock

go 1.26

require go.yaml.in/yaml/v3 v3.0.6

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
)
