//! Label queues on NATS JetStream.
