//! Reading files through a [`Storage`]: a whole small file, or a sequential reader.

use std::io;
use std::path::Path;

use crate::storage::{Storage, StorageFile};

/// The whole of `path`, or `None` when there is no such file. A file longer than
/// `bytes_max` is refused (`InvalidData`, naming the file) rather than read into memory.
pub fn read_file(
    storage: &dyn Storage,
    path: &Path,
    bytes_max: u64,
) -> io::Result<Option<Vec<u8>>> {
    let file = match storage.open(path, false) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.byte_len()?;
    if len > bytes_max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is {len} bytes, more than the {bytes_max} it may hold",
                path.display()
            ),
        ));
    }
    // Bounded just above.
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(Some(bytes))
}

/// Sequential reads of a [`StorageFile`] from a position, as [`io::Read`] (wrap it in a
/// `BufReader` for small reads).
#[derive(Debug)]
pub struct FileReader<'a> {
    file: &'a dyn StorageFile,
    position: u64,
}

impl<'a> FileReader<'a> {
    pub fn new(file: &'a dyn StorageFile, position: u64) -> FileReader<'a> {
        FileReader { file, position }
    }
}

impl io::Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.position)?;
        self.position += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyStorage;
    use std::io::Read;

    #[test]
    fn reads_whole_files_missing_ones_and_refuses_long_ones() {
        let fs = FaultyStorage::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        assert_eq!(read_file(&fs, Path::new("/d/f"), 10).unwrap(), None);
        let file = fs.open(Path::new("/d/f"), true).unwrap();
        file.write_all_at(b"hello", 0).unwrap();
        assert_eq!(
            read_file(&fs, Path::new("/d/f"), 10).unwrap().unwrap(),
            b"hello"
        );
        let e = read_file(&fs, Path::new("/d/f"), 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut out = String::new();
        FileReader::new(&*file, 1).read_to_string(&mut out).unwrap();
        assert_eq!(out, "ello");
    }
}
