//! The BLAKE3 hash of a Parquet file's parts that a read fetches whole: each
//! column chunk, and the footer. A pass reads a few columns of a file;
//! with these it checks exactly the bytes it decodes (and the footer that
//! says where they are), where the file's own hash made it read every
//! column. They are computed as a file's bytes stream past (when dpgate
//! writes it, or when it is registered) and checked by the reader as each
//! part is fetched ([`super::ObjectReader`]).

use std::ops::Range;

use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader, RowGroupMetaData};

use crate::domain::dataset::ChunkHashes;

/// A Parquet file's last 8 bytes: its metadata's length, then `PAR1`.
const TAIL: usize = 8;

/// The byte ranges of the column chunks of `groups`, in file order.
pub(super) fn chunk_ranges(groups: &[RowGroupMetaData]) -> Vec<Range<u64>> {
    let mut ranges: Vec<Range<u64>> = groups
        .iter()
        .flat_map(|group| group.columns())
        .map(|column| {
            let (start, length) = column.byte_range();
            start..start.saturating_add(length)
        })
        .collect();
    ranges.sort_by_key(|range| range.start);
    ranges
}

/// How many bytes the footer that ends with `tail` (a file's last 8
/// bytes) takes, tail included; `None` if `tail` is not a Parquet file's.
pub(super) fn footer_bytes(tail: &[u8]) -> Option<u64> {
    let (length, magic) = tail.split_at_checked(4)?;
    if magic != b"PAR1" {
        return None;
    }
    let length = u32::from_le_bytes(length.try_into().ok()?);
    Some(u64::from(length) + TAIL as u64)
}

/// The footer's metadata: all of `footer` (a file's last bytes, tail
/// included) but its tail.
pub(super) fn metadata_bytes(footer: &[u8]) -> &[u8] {
    &footer[..footer.len().saturating_sub(TAIL)]
}

/// BLAKE3, not SHA-256 as for a whole file: a pass hashes every byte it
/// reads, and SHA-256 (with the CPU's SHA extensions) was 16% of a WALR
/// pass's CPU time.
pub(super) fn hash(bytes: &[u8]) -> [u8; 32] {
    blake3::hash(bytes).into()
}

/// Hashes of ranges of a stream of bytes, each taken when its last byte
/// has arrived. Ranges may be told after their bytes have streamed past
/// (a writer learns where its chunks are once a row group is written), so
/// every byte from the first range not yet hashed on is kept; bytes
/// before it are dropped. The ranges must be disjoint and come in file
/// order.
#[derive(Debug, Default)]
pub(super) struct RangeHashes {
    /// The stream offset of `kept[0]`.
    at: u64,
    /// The stream's last bytes, from the first range not yet hashed or,
    /// with none to hash, from the end of the last (a writer's footer is
    /// among them).
    kept: Vec<u8>,
    ranges: Vec<Range<u64>>,
    hashes: Vec<u8>,
}

impl RangeHashes {
    /// Tells the next ranges, after those told before.
    pub(super) fn extend(&mut self, ranges: &[Range<u64>]) -> Result<(), String> {
        let mut end = self.ranges.last().map_or(0, |range| range.end);
        for range in ranges {
            if range.start < end || range.end < range.start {
                return Err(format!(
                    "its parts overlap or are out of order at byte {}",
                    range.start
                ));
            }
            end = range.end;
            self.ranges.push(range.clone());
        }
        self.settle();
        Ok(())
    }

    /// The next bytes of the stream.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        self.kept.extend_from_slice(bytes);
        self.settle();
    }

    /// Hashes every range whose bytes have all arrived, and drops the
    /// bytes no range still to hash needs.
    fn settle(&mut self) {
        let end = self.at + self.kept.len() as u64;
        let mut done = self.hashes.len() / 32;
        while let Some(range) = self.ranges.get(done).filter(|range| range.end <= end) {
            let from = (range.start - self.at) as usize;
            let to = (range.end - self.at) as usize;
            self.hashes.extend_from_slice(&hash(&self.kept[from..to]));
            done += 1;
        }
        let keep_from = match self.ranges.get(done) {
            Some(next) => next.start,
            None => self.ranges.last().map_or(self.at, |last| last.end),
        }
        .clamp(self.at, end);
        self.kept.drain(..(keep_from - self.at) as usize);
        self.at = keep_from;
    }

    /// How many ranges were told.
    pub(super) fn told(&self) -> usize {
        self.ranges.len()
    }

    /// The hashes of a file of `bytes` bytes whose bytes have all been
    /// fed, some of its column chunks told or none: its footer, among the
    /// bytes kept, says where the others are.
    pub(super) fn finish_file(mut self, bytes: u64) -> Result<ChunkHashes, String> {
        let kept = &self.kept;
        let footer = kept
            .len()
            .checked_sub(TAIL)
            .and_then(|at| footer_bytes(&kept[at..]))
            .filter(|&footer| footer <= kept.len() as u64)
            .ok_or("its footer is not among its last bytes")?;
        let metadata = ParquetMetaDataReader::decode_metadata(metadata_bytes(
            &kept[kept.len() - footer as usize..],
        ))
        .map_err(|error| format!("its footer: {error}"))?;
        let ranges = checked_ranges(&metadata, bytes, footer)?;
        let told = self.told();
        if ranges.get(..told) != Some(&self.ranges[..]) {
            return Err("its footer places its column chunks elsewhere".to_owned());
        }
        self.extend(&ranges[told..])?;
        self.finish(footer)
    }

    /// The hashes of `footer_bytes`-long footer's file, once every range
    /// told (the footer's last) is hashed.
    pub(super) fn finish(self, footer_bytes: u64) -> Result<ChunkHashes, String> {
        if self.hashes.len() / 32 != self.ranges.len() {
            return Err(format!(
                "the file ended before byte {}",
                self.ranges.last().map_or(0, |range| range.end)
            ));
        }
        Ok(ChunkHashes {
            footer_bytes,
            blake3: self.hashes.into(),
        })
    }
}

/// The ranges a file of `bytes` bytes is checked by: `metadata`'s column
/// chunks, then its `footer`-byte footer. Refused if they overlap or run
/// past the footer's start.
pub(super) fn checked_ranges(
    metadata: &ParquetMetaData,
    bytes: u64,
    footer: u64,
) -> Result<Vec<Range<u64>>, String> {
    let footer_start = bytes
        .checked_sub(footer)
        .ok_or("its footer is longer than the file")?;
    let mut ranges = chunk_ranges(metadata.row_groups());
    ranges.push(footer_start..bytes);
    if ranges
        .windows(2)
        .any(|pair| pair[0].end > pair[1].start || pair[0].start > pair[0].end)
    {
        return Err("its column chunks overlap, or overlap its footer".to_owned());
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes_of(bytes: &[u8], ranges: &[Range<u64>]) -> Vec<u8> {
        ranges
            .iter()
            .flat_map(|range| hash(&bytes[range.start as usize..range.end as usize]))
            .collect()
    }

    #[test]
    fn ranges_told_before_or_after_their_bytes_hash_the_same() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let ranges = [4..100, 100..350, 360..900, 990..1000];
        let expected = hashes_of(&bytes, &ranges);
        for piece in [1, 7, 64, 1000] {
            // Told first, fed in pieces.
            let mut ahead = RangeHashes::default();
            ahead.extend(&ranges).unwrap();
            for part in bytes.chunks(piece) {
                ahead.feed(part);
            }
            assert_eq!(&*ahead.finish(10).unwrap().blake3, &expected[..]);
            // Told one by one after its bytes went past, as a writer does.
            let mut behind = RangeHashes::default();
            for (told, part) in bytes.chunks(piece).enumerate() {
                behind.feed(part);
                let past = ((told + 1) * piece) as u64;
                let known = ranges.iter().take_while(|r| r.end <= past).count();
                behind.extend(&ranges[behind.told()..known]).unwrap();
                assert!(
                    behind.kept.len() <= 1000 - 350 + piece,
                    "drops what it hashed"
                );
            }
            behind.extend(&ranges[behind.told()..]).unwrap();
            let hashes = behind.finish(10).unwrap();
            assert_eq!(&*hashes.blake3, &expected[..]);
            assert_eq!(hashes.count(), Some(4));
            assert_eq!(hashes.get(1), Some(&hash(&bytes[100..350])[..]));
        }
    }

    #[test]
    fn overlapping_ranges_and_a_short_stream_are_refused() {
        let mut hashes = RangeHashes::default();
        assert!(hashes.extend(&[0..10, 5..20]).is_err());
        let mut hashes = RangeHashes::default();
        hashes.extend(&[0..10, 10..20]).unwrap();
        hashes.feed(&[0; 15]);
        assert_eq!(
            hashes.finish(1).unwrap_err(),
            "the file ended before byte 20"
        );
    }

    #[test]
    fn a_footer_is_read_from_the_tail() {
        assert_eq!(
            footer_bytes(&[3, 1, 0, 0, b'P', b'A', b'R', b'1']),
            Some(267)
        );
        assert_eq!(footer_bytes(&[3, 1, 0, 0, b'P', b'A', b'R', b'2']), None);
        assert_eq!(footer_bytes(&[1, 2]), None);
        assert_eq!(metadata_bytes(&[1, 2, 3, 4, 5, 6, 7, 8, 9]), &[1]);
    }
}
