//! pcap/pcapng and packet decoding into trace events (pure)
