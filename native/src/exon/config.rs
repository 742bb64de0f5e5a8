//! The parameters the engine reads of an `ExonConfig` (`a3m/exon/config.py`), units in names.

#[derive(Debug, Clone)]
pub struct Config {
    pub max_datagram_size: i64,
    pub window_per_peer: i64,
    pub window_global: i64,
    pub slots_ahead: i64,
    pub max_live_slots: i64,
    pub rto_initial_s: f64,
    pub rto_max_s: f64,
    pub first_probe_rate: f64,
    pub ack_delay_s: f64,
    pub pacing: bool,
    pub idle_release_s: f64,
    pub probe_interval_s: f64,
    pub probe_interval_max_s: f64,
    pub max_message_size: i64,
    pub recv_buffer_bytes: i64,
    pub clock_reserve_block: u64,
    pub close_revoke_timeout_s: f64,
    pub close_linger_rtos: f64,
    pub peer_timeout_s: f64,
    pub secure: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_datagram_size: 1400,
            window_per_peer: 2048,
            window_global: 16384,
            slots_ahead: 2048,
            max_live_slots: 65536,
            rto_initial_s: 0.2,
            rto_max_s: 2.0,
            first_probe_rate: 200.0,
            ack_delay_s: 0.002,
            pacing: true,
            idle_release_s: 1.0,
            probe_interval_s: 5.0,
            probe_interval_max_s: 60.0,
            max_message_size: 64 * 1024 * 1024,
            recv_buffer_bytes: 32 * 1024 * 1024,
            clock_reserve_block: 1 << 20,
            close_revoke_timeout_s: 10.0,
            close_linger_rtos: 4.0,
            peer_timeout_s: 15.0,
            secure: true,
        }
    }
}

impl Config {
    pub fn close_linger_s(&self) -> f64 {
        self.close_linger_rtos * self.rto_max_s
    }
}
