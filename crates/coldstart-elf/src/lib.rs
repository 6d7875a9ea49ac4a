//! Reading ELF files: symbols, sections, segments, build-ids and file offsets to pages.
