-- Privacy unit `user`: datasets.privacy_unit may be 'user'.
ALTER TABLE datasets DROP CONSTRAINT datasets_privacy_unit_check;
ALTER TABLE datasets ADD CONSTRAINT datasets_privacy_unit_check
    CHECK (privacy_unit IN ('label', 'row', 'user'));
